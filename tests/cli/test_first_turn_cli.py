"""A new user's first `chatapp ask` waits for no one-off measurement (issue 36), end to end
through the installed script on the real model, in a fresh home (every test gets one): the
memory-bandwidth probe runs after the first reply, which says so, and the next turn and the
next process have its figure. Order and structure only: nothing here is timed."""

import pytest

from chatapp import paths
from chatapp.engine.machine.bandwidth import CACHE_FILE, MEASURING
from tests.cli.conftest import records

ASK = ("--json", "--temperature", "0", "--max-tokens", "8", "--ctx", "512")


@pytest.mark.unmeasured_machine  # a first run: the machine is not measured yet
def test_a_fresh_home_answers_first_and_measures_the_machine_after(chatapp_exe):
    first, second = records(chatapp_exe("ask", "Name a colour.", "Name another.", *ASK))
    # The first turn's figures were taken before the probe ran: it has none, and says why.
    assert first["memory_bandwidth_gbps"] is None and first["memory_bandwidth_note"] == MEASURING
    assert first["decode_bytes_per_token"] > 0  # the rest of the roofline is there
    assert second["memory_bandwidth_gbps"] > 0 and "memory_bandwidth_note" not in second
    assert (paths.cache_dir() / CACHE_FILE).is_file()
    # The next process finds it on disk: its first turn has the same figure from the start.
    (again,) = records(chatapp_exe("ask", "Name a fruit.", *ASK))
    assert again["memory_bandwidth_gbps"] == second["memory_bandwidth_gbps"]
    assert "memory_bandwidth_note" not in again
