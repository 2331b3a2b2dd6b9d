from chatapp.engine.hardware import _linux_physical_cores, physical_cores, threads_beside_ui

HYPERTHREADED = "".join(
    f"processor\t: {cpu}\nphysical id\t: 0\ncore id\t\t: {cpu % 2}\n\n" for cpu in range(4)
)


def test_hyperthreads_count_once(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(HYPERTHREADED)
    assert _linux_physical_cores(cpuinfo) == 2


def test_the_ui_keeps_a_core_but_llama_gets_at_least_one():
    assert threads_beside_ui() == max(1, physical_cores() - 1)
    assert threads_beside_ui() >= 1
