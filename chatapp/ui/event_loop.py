"""The app's event loop, ended without joining the thread workers.

App.run uses asyncio.run, which ends by joining every thread of the loop's default executor,
where Textual runs thread workers; one stuck in llama.cpp kept the process, and a blank
terminal, for as long as its call ran. ChatApp.run runs on a loop of its own and ends it here.
"""

from __future__ import annotations

import asyncio


def close_loop(loop: asyncio.AbstractEventLoop) -> None:
    """What asyncio.run does after its coroutine, less joining the default executor's threads:
    cancel the tasks left, finish async generators, close the loop (which shuts the executor
    down without waiting)."""
    try:
        tasks = asyncio.all_tasks(loop)
        for task in tasks:
            task.cancel()
        if tasks:
            loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
    finally:
        loop.close()
