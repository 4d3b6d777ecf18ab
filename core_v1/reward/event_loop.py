"""`get_event_loop()`: the event loop for an async reward function's own awaits and executors.

verl's reward files call `verl.utils.ray_utils.get_event_loop()` to reach the loop they run on
(`await loop.run_in_executor(None, grade)`); the migration tool points them here. On V1 an async
reward function runs on its agent-loop worker's loop, which this returns; called where no loop
runs (a sync caller, a test), it returns the thread's loop, creating and setting one if the thread
has none or only a closed one.
"""

from __future__ import annotations

import asyncio
import warnings


def get_event_loop() -> asyncio.AbstractEventLoop:
    """The running loop, else this thread's loop, else a new loop set as this thread's."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        pass
    try:
        with warnings.catch_warnings():  # asyncio deprecates asking for a loop that is not running
            warnings.simplefilter("ignore", DeprecationWarning)
            loop = asyncio.get_event_loop_policy().get_event_loop()
        if not loop.is_closed():
            return loop
    except RuntimeError:  # a thread other than the main one has no loop until one is set
        pass
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    return loop
