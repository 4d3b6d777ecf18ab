"""`UserError`: the one base of every refusal that describes a mistake in what the user wrote.

A config key, a data file, a plug-in, a reward function, a tool: when the user's input is wrong,
the code raises a subclass of `UserError` whose message names the problem and the fix, and the
entrypoint (`core_v1.main_ppo.main`) prints it as one `error:` line and exits with 2. Anything
else that escapes is a bug of ours and keeps its traceback.
"""


class UserError(Exception):
    """A mistake in the user's config, data or code; the message names the problem and the fix."""


def is_user_error(error: BaseException) -> bool:
    """Errors that describe a mistake in the user's config, data or plug-in, not a bug of ours: every
    `UserError`, and a path the user named that the library opening it did not find."""
    return isinstance(error, (UserError, FileNotFoundError))
