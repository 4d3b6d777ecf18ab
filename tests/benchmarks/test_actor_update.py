"""benchmarks/actor_update.py on a tiny CPU model: both sides do the same update, and it prints."""

from __future__ import annotations

import torch

from benchmarks import actor_update as bench


def test_bare_loop_makes_the_same_update_as_ours(tmp_path):
    torch.manual_seed(0)
    model_dir = bench.make_model("tiny", tmp_path / "model")
    batch = bench.make_batch(rows=4, min_len=40, max_len=96, prompt_len=8, vocab=512)
    ours = bench.ActorEngine(bench.engine_config(model_dir, 4, 96, "fp32"))
    ours.set_total_training_steps(2)
    batch["old_log_probs"] = ours.compute_log_prob(batch)[0]
    groups = bench.micro_batch_indices(batch, bench.TokenBudget(96, "--max-len"))
    assert len(groups) > 1  # the token budget really splits the batch
    bare = bench.BareLoop(model_dir, "fp32", torch.device("cpu"), groups)
    initial = {name: p.detach().clone() for name, p in ours.model.named_parameters()}
    for _ in range(2):  # Adam's first step is lr * sign(g); the second weighs gradient magnitudes too
        ours.update_policy(batch)
        bare.update(batch)
    # Compare the steps, not the weights: a 1e-6 step is far below a weight's own tolerance.
    for (name, mine), (_, theirs) in zip(ours.model.named_parameters(), bare.model.named_parameters()):
        step_ours, step_bare = mine.detach() - initial[name], theirs.detach() - initial[name]
        assert step_ours.abs().max() > 0, name
        torch.testing.assert_close(step_ours, step_bare, rtol=1e-2, atol=1e-8, msg=name)  # steps are ~lr = 1e-6


def test_benchmark_runs_on_cpu(capsys):
    result = bench.main(
        [
            "--model",
            "tiny",
            "--device",
            "cpu",
            "--dtype",
            "fp32",
            "--rows",
            "4",
            "--min-len",
            "40",
            "--max-len",
            "96",
            "--prompt-len",
            "8",
            "--repeats",
            "1",
            "--peak-tflops",
            "1",
        ]
    )
    out = capsys.readouterr().out
    assert "ours:" in out and "bare:" in out and "MFU" in out
    assert result["ours_s"] > 0 and result["bare_s"] > 0 and result["tokens"] > 0
