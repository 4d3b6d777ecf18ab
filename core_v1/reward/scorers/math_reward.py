"""verl 0.6+'s name for the MATH scorer (`verl.utils.reward_score.math_reward`): `math`'s functions.

A module of its own rather than a rename, so that a migrated `from ... import math_reward` keeps
its local name and cannot shadow the standard library's `math` in the user's file.
"""

from core_v1.reward.scorers.math import (  # noqa: F401
    compute_score,
    fix_a_slash_b,
    fix_fracs,
    fix_sqrt,
    is_equiv,
    last_boxed_only_string,
    remove_boxed,
    remove_right_units,
    strip_string,
)
