from chatapp.engine.machine.hardware import _linux_physical_cores, cpu_name, physical_cores

HYPERTHREADED = "".join(
    f"processor\t: {cpu}\nphysical id\t: 0\ncore id\t\t: {cpu % 2}\n\n" for cpu in range(4)
)


def test_hyperthreads_count_once(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(HYPERTHREADED)
    assert _linux_physical_cores(cpuinfo) == 2


def test_this_machine_has_a_name_and_cores():
    assert cpu_name()
    assert physical_cores() >= 1
