"""The built-in tools read only under the roots the user allows: no '..', no way out by a link."""

import os

from chatapp.engine.tools.builtin import Roots, builtin_tools, list_folder, read_file
from chatapp.engine.tools.registry import ToolRegistry
from chatapp.engine.tools.servers import ToolSettings
from chatapp.engine.tools.spec import ToolCall


def make_tree(tmp_path):
    root = tmp_path / "notes"
    (root / "sub").mkdir(parents=True)
    (root / "a.txt").write_text("hello from a")
    (root / "sub" / "b.md").write_text("# b")
    (tmp_path / "secret.txt").write_text("top secret")
    return root


def test_reads_and_lists_under_a_root(tmp_path):
    roots = Roots.of([make_tree(tmp_path)])
    assert read_file(roots, {"path": "a.txt"}).text == "hello from a"
    assert read_file(roots, {"path": str(tmp_path / "notes" / "sub" / "b.md")}).text == "# b"
    listing = list_folder(roots, {"path": "."}).text
    assert "a.txt (12 bytes)" in listing and "sub/" in listing


def test_dot_dot_and_absolute_paths_outside_are_refused(tmp_path):
    roots = Roots.of([make_tree(tmp_path)])
    for path in ("../secret.txt", "sub/../../secret.txt", str(tmp_path / "secret.txt"), "/etc/passwd"):
        result = read_file(roots, {"path": path})
        assert result.error and "refused" in result.text and "top secret" not in result.text, path
    assert list_folder(roots, {"path": ".."}).error


def test_a_link_out_of_a_root_is_refused(tmp_path):
    root = make_tree(tmp_path)
    os.symlink(tmp_path / "secret.txt", root / "link.txt")
    os.symlink(tmp_path, root / "up")
    roots = Roots.of([root])
    for path in ("link.txt", "up/secret.txt"):
        result = read_file(roots, {"path": path})
        assert result.error and "outside the allowed folders" in result.text, path
    assert list_folder(roots, {"path": "up"}).error


def test_without_roots_only_the_time_is_offered():
    assert list(builtin_tools(Roots.of([]))) == ["current_time"]
    registry = ToolRegistry(ToolSettings())
    assert [t.name for t in registry.enabled()] == ["current_time"]
    assert registry.call(ToolCall("current_time", {})).text[:4].isalpha()


def test_disabled_tools_are_listed_but_not_offered(tmp_path):
    registry = ToolRegistry(ToolSettings(roots=(str(make_tree(tmp_path)),), disabled=("list_folder",)))
    assert [t.name for t in registry.all()] == ["current_time", "read_file", "list_folder"]
    assert [t.name for t in registry.enabled()] == ["current_time", "read_file"]


def test_binary_files_and_missing_paths_are_one_line(tmp_path):
    root = make_tree(tmp_path)
    (root / "blob.bin").write_bytes(b"\0\1\2")
    roots = Roots.of([root])
    assert "binary" in read_file(roots, {"path": "blob.bin"}).text
    assert "does not exist" in read_file(roots, {"path": "nope.txt"}).text


def test_keys_the_process_and_chatapps_own_files_are_never_read_even_under_a_root(tmp_path, monkeypatch):
    from chatapp import paths

    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("PRIVATE KEY")
    (home / "notes.txt").write_text("fine to read")
    monkeypatch.setenv("HOME", str(home))
    for folder in (paths.config_dir(), paths.data_dir() / "sessions"):
        folder.mkdir(parents=True, exist_ok=True)
    paths.config_file().write_text('[mcp_servers.x]\ncommand = "x"\nenv = { TOKEN = "sk-config" }\n')
    (paths.data_dir() / "sessions" / "sessions.db").write_text("every chat")
    os.symlink(home / ".ssh", home / "keys")  # a link inside the root to a guarded place
    os.symlink(paths.config_file(), home / "cfg.toml")
    roots = Roots.of([home, "/", tmp_path])
    assert read_file(roots, {"path": str(home / "notes.txt")}).text == "fine to read"
    for path in (str(home / ".ssh" / "id_ed25519"), "~/.ssh/id_ed25519", str(home / "keys" / "id_ed25519"),
                 "/proc/self/environ", str(paths.config_file()), str(home / "cfg.toml"),
                 str(paths.data_dir() / "sessions" / "sessions.db"), "/dev/zero"):
        result = read_file(roots, {"path": path})
        assert result.error and "never read" in result.text, (path, result.text[:80])
    for folder in (str(home / ".ssh"), "/proc/self", str(paths.data_dir())):
        result = list_folder(roots, {"path": folder})
        assert result.error and "never read" in result.text, folder
