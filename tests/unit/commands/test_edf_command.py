"""`nanochat-bench edf`: the checked-in edf/*.toml equal what their header command renders; flags and errors.
    python -m pytest tests/unit/commands/test_edf_command.py -q
Refresh the checked-in files after changing bench/runtimes/edf.py: nanochat-bench edf --regenerate edf/*.toml
"""

import tomllib
from pathlib import Path

import pytest

from bench.cli import main
from bench.commands import containers
from bench.errors import ConfigError
from bench.runtimes import edf

REPO = Path(__file__).resolve().parents[3]
CHECKED_IN = sorted((REPO / "edf").glob("*.toml"))


def test_there_are_checked_in_edfs_for_both_image_forms():
    images = {tomllib.loads(p.read_text())["image"] for p in CHECKED_IN}
    assert edf.NGC_IMAGE in images  # remote registry#image form
    assert any(i.endswith(".sqsh") and i.startswith("${SCRATCH}/") for i in images)  # local SquashFS form


@pytest.mark.parametrize("path", CHECKED_IN, ids=lambda p: p.name)
def test_checked_in_edf_equals_the_command_output(path, capsys):
    argv = containers.header_argv(path)
    assert main(["edf", *argv]) == 0
    assert capsys.readouterr().out == path.read_text(), \
        f"{path.name} is stale: run `nanochat-bench edf --regenerate edf/*.toml`"


@pytest.mark.parametrize("image", ["/s/img.sqsh", "./img.sqsh", "${SCRATCH}/img.sqsh", "img", "nvcr.io#nvidia/x:1"])
def test_an_absolute_variable_or_dot_relative_image_path_and_a_registry_reference_are_written(image, tmp_path):
    out = tmp_path / "x.toml"
    assert main(["edf", "--image", image, "-o", str(out)]) == 0
    assert tomllib.loads(out.read_text())["image"] == image


def test_flags_reach_the_file(tmp_path):
    out = tmp_path / "x.toml"
    assert main(["edf", "--image", "/s/img.sqsh", "--no-default-mounts", "--mount", "/a:/b:ro",
                 "--workdir", "", "--env", "NCCL_DEBUG=WARN", "--env", "EXTRA=a=b", "--ofi-variant", "cuda13",
                 "--annotation", "com.hooks.cxi.enabled=true", "--read-only", "--output", str(out)]) == 0
    doc = tomllib.loads(out.read_text())
    assert doc["mounts"] == ["/a:/b:ro"] and "workdir" not in doc and doc["writable"] is False
    assert doc["env"]["NCCL_DEBUG"] == "WARN" and doc["env"]["EXTRA"] == "a=b"
    assert doc["env"]["MPICH_GPU_SUPPORT_ENABLED"] == "0" and "NCCL_NET" not in doc["env"]  # the hook's, not pinned
    assert doc["annotations"]["com"]["hooks"]["aws_ofi_nccl"]["variant"] == "cuda13"
    assert doc["annotations"]["com"]["hooks"]["cxi"]["enabled"] == "true"
    assert not list(tmp_path.glob(".*.tmp"))  # atomic write left no temp file


def test_a_hand_use_edf_leaves_val_files_k_to_the_users_environment(tmp_path, monkeypatch):
    """The EDF pinned NANOCHAT_VAL_FILES_K=1, and CE's [env] wins over the host's, so the K a user exported for
    more ranks (the plan's) never reached the trainer; `--env` still sets one on purpose."""
    out = tmp_path / "x.toml"
    assert main(["edf", "--image", edf.SQSH_IMAGE, "-o", str(out)]) == 0
    assert "NANOCHAT_VAL_FILES_K" not in tomllib.loads(out.read_text())["env"]
    assert main(["edf", "--image", edf.SQSH_IMAGE, "--env", "NANOCHAT_VAL_FILES_K=4", "-o", str(out)]) == 0
    assert tomllib.loads(out.read_text())["env"]["NANOCHAT_VAL_FILES_K"] == "4"


def test_regenerate_rewrites_from_the_header(tmp_path):
    path = tmp_path / "a.toml"
    assert main(["edf", "--image", "img", "--no-default-env", "--no-ofi-hook", "-o", str(path)]) == 0
    rendered = path.read_text()
    path.write_text(rendered.replace('image = "img"', 'image = "edited"'))
    assert main(["edf", "--regenerate", str(path)]) == 0
    assert path.read_text() == rendered
    assert tomllib.loads(rendered) == {"image": "img", "mounts": list(edf.DEFAULT_MOUNTS),
                                       "workdir": edf.WORKDIR, "writable": True}


@pytest.mark.parametrize("argv, fragment", [
    (["edf"], "--image is required"),
    (["edf", "--image", "img", "--env", "NOEQUALS"], "--env 'NOEQUALS' is not NAME=VALUE"),
    # the flag and the part at fault are named, with what a mount may be
    (["edf", "--image", "img", "--mount", "relative:/x"],
     "--mount 'relative:/x' has the relative SRC 'relative'; a mount is SRC:DST[:FLAGS] with SRC absolute, ./relative"),
    (["edf", "--image", "img", "--mount", "/a:x"], "--mount '/a:x' has the relative DST 'x'; a mount is SRC:DST"),
    (["edf", "--image", "img", "--mount", "/a"], "--mount '/a' has 1 ':'-separated part(s); a mount is SRC:DST"),
    # --env and --annotation are named with the item given and what is valid, not as the EDF's [env] or annotation
    (["edf", "--image", "img", "--env", "1BAD=x"], "--env '1BAD=x': the name '1BAD' is not a valid environment "
     "variable name (letters, digits and '_', not starting with a digit"),
    (["edf", "--image", "img", "--annotation", "com..x=y"], "--annotation 'com..x=y': the name 'com..x' has an empty "
     "part between dots; an annotation name must be dotted words, e.g. com.hooks.cxi.enabled"),
    (["edf", "--image", "img", "--annotation", "com.hooks.cxi.enabled=yes"],
     "--annotation 'com.hooks.cxi.enabled=yes': a hook's enabled annotation is \"true\" or \"false\""),
    (["edf", "--image", "img", "--annotation", "com.a.b=2", "--annotation", "com.a=1"],
     "--annotation 'com.a=1' and --annotation 'com.a.b=2' clash: one name is a prefix of the other"),
    (["edf", "--image", "img", "--annotation", "com.hooks.aws_ofi_nccl=x"], "--annotation 'com.hooks.aws_ofi_nccl=x' "
     "and the annotation 'com.hooks.aws_ofi_nccl.enabled' clash"),
    (["edf", "--regenerate", "pyproject.toml"], "no '# Generated by: nanochat-bench edf"),
    (["edf", "--regenerate", "/nonexistent.toml"], "cannot read EDF /nonexistent.toml"),
    (["edf", "--image", "img", "--regenerate", "x.toml"], "--regenerate takes only file names"),
    # enroot reads a registry before '/' as a Docker Hub image: the EDF would fail at the first srun
    (["edf", "--image", "nvcr.io/nvidia/pytorch:25.10-py3"], "write the registry with '#', as in 'nvcr.io#nvidia"),
    (["edf", "--image", "my image:1"], "holds whitespace"),
    # CE, as enroot, reads an image not starting with '/' or './' as a registry reference: Docker Hub's images/...
    (["edf", "--image", "images/nanochat-bench.sqsh"], "--image 'images/nanochat-bench.sqsh' is not an absolute path"),
    (["edf", "--image", "nanochat-bench.sqsh"], "--image 'nanochat-bench.sqsh' is not an absolute path"),
    (["edf", "--image", "../nanochat-bench.sqsh"], "--image '../nanochat-bench.sqsh' is not an absolute path"),
    (["edf", "--image", "~/nanochat-bench.sqsh"], "--image '~/nanochat-bench.sqsh' is not an absolute path"),
    # the variant of a hook left off went nowhere, without a word
    (["edf", "--image", "img", "--no-ofi-hook", "--ofi-variant", "cuda12"], "--ofi-variant cuda12 with --no-ofi-hook"),
])
def test_mistakes_give_one_line(argv, fragment, capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and fragment in err and "Traceback" not in err


@pytest.mark.parametrize("flags, named", [(["--mount", "/a:/b"], "--mount"), (["--read-only"], "--read-only"),
                                          (["--env", "A=b", "--no-ofi-hook"], "--env, --no-ofi-hook")])
def test_regenerate_refuses_the_flags_it_would_drop(flags, named, tmp_path, capsys):
    """--regenerate FILE --mount /a:/b rewrote FILE from its header and dropped the mount without a word."""
    path = tmp_path / "a.toml"
    path.write_text("untouched")
    assert main(["edf", "--regenerate", str(path), *flags]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: --regenerate takes only file names, not {named};")
    assert path.read_text() == "untouched"


def test_parse_edf_args_rejects_unknown_flags():
    with pytest.raises(ConfigError, match="unknown --bogus"):
        containers.parse_edf_args(["--image", "x", "--bogus"])


def test_regenerate_of_a_header_with_an_abbreviated_flag_is_refused_as_edf_refuses_it(tmp_path, capsys):
    """A header's `--ima` was read as --image, though `nanochat-bench edf --ima ...` itself is refused."""
    path = tmp_path / "edited.toml"
    path.write_text("# Generated by: nanochat-bench edf --ima /x/ok.sqsh\nimage = \"x\"\n")
    assert main(["edf", "--regenerate", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}: ") and "unknown --ima /x/ok.sqsh" in err and err.count("\n") == 1
    assert path.read_text() == "# Generated by: nanochat-bench edf --ima /x/ok.sqsh\nimage = \"x\"\n"


# Control characters and line breaks cannot sit in the header's one-line command (a TOML comment may not
# hold them, and a line break splits the command so that --regenerate cannot read it back), and text
# that is not UTF-8 cannot be written at all: such a value is refused with one line naming the flag.
HOSTILE_FLAG_VALUES = [
    ("--image", "/x/a\x01b.sqsh"), ("--image", "/x/esc\x1b[31m.sqsh"), ("--image", "/x/del\x7f.sqsh"),
    ("--image", "/x/ls\u2028.sqsh"), ("--image", "/x/nel\x85.sqsh"), ("--mount", "/a\x01:/b"),
    ("--mount", "/a:/b\x1f"), ("--annotation", "com.x.y=a\x02b"), ("--annotation", "com.x.z=line\nbreak"),
    ("--env", "A=x\x01y"), ("--env", "B=x\ny"), ("--env", "C=\x0b"), ("--env", "D=x\u2029y"),
    ("--workdir", "/w\rx"), ("--image", "/x/not-utf8-\udcff.sqsh"),
]


@pytest.mark.parametrize("flag, value", HOSTILE_FLAG_VALUES, ids=lambda v: ascii(v))
def test_control_characters_in_a_flag_are_refused_with_one_line(flag, value, tmp_path, capsys):
    out = tmp_path / "e.toml"
    argv = ["edf", "-o", str(out)] + (["--image", "/x/ok.sqsh"] if flag != "--image" else []) + [flag, value]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {flag} ") and err.count("\n") == 1, err
    assert "control character" in err or "not UTF-8" in err
    assert not out.exists()


def test_a_tab_is_fine_and_round_trips(tmp_path):
    out = tmp_path / "e.toml"
    assert main(["edf", "--image", "/x/ok.sqsh", "--env", "T=a\tb", "-o", str(out)]) == 0
    assert tomllib.loads(out.read_text())["env"]["T"] == "a\tb"
    before = out.read_text()
    assert main(["edf", "--regenerate", str(out)]) == 0 and out.read_text() == before


def test_regenerate_of_a_header_cut_by_a_newline_is_one_clear_line(tmp_path, capsys):
    """What `edf --env 'B=x<newline>y'` used to write: the command split over two comment lines."""
    path = tmp_path / "legacy.toml"
    path.write_text("# Generated by: nanochat-bench edf --image /x/ok.sqsh --env 'B=x\n# y'\nimage = \"/x/ok.sqsh\"\n")
    assert main(["edf", "--regenerate", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and str(path) in err
    assert "line break" in err and "ValueError" not in err


@pytest.mark.parametrize("header, message", [("--image", "argument --image: expected one argument"),
                                             ("--image x --bogus", "unknown --bogus"), ("", "--image is required")])
def test_regenerate_of_a_header_with_bad_flags_is_one_line_naming_the_file(header, message, tmp_path, capsys):
    """A header's flag without its value printed edf's usage and exited 2; no message named the file."""
    path = tmp_path / "edited.toml"
    path.write_text(f"# Generated by: nanochat-bench edf {header}\nimage = \"x\"\n")
    assert main(["edf", "--regenerate", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}: ") and message in err and err.count("\n") == 1
    assert path.read_text() == "# Generated by: nanochat-bench edf " + header + '\nimage = "x"\n'


def test_regenerate_of_a_file_that_is_not_utf8_is_one_clear_line(tmp_path, capsys):
    path = tmp_path / "binary.toml"
    path.write_bytes(b"# Generated by: nanochat-bench edf --image /x/\xff.sqsh\n")
    assert main(["edf", "--regenerate", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and str(path) in err


@pytest.mark.parametrize("where", ["a directory", "under a file"])
def test_an_output_that_cannot_be_written_is_one_clear_line(tmp_path, capsys, where):
    (tmp_path / "file").write_text("")
    out = tmp_path if where == "a directory" else tmp_path / "file" / "e.toml"
    assert main(["edf", "--image", "/x/ok.sqsh", "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: cannot write EDF {out}: ") and err.count("\n") == 1, err
    assert not list(tmp_path.glob(".*.tmp"))


@pytest.mark.parametrize("workdir", ["relative", "./here", "workspace/nanochat-bench", "~/x"])
def test_a_relative_workdir_is_refused_with_one_line(workdir, tmp_path, capsys):
    """Regression: `--workdir relative` was written as workdir = "relative"; the container's must be absolute."""
    out = tmp_path / "e.toml"
    assert main(["edf", "--image", "/x/ok.sqsh", "--workdir", workdir, "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: --workdir {workdir!r} ") and err.count("\n") == 1, err
    assert "absolute" in err and "''" in err and not out.exists()


@pytest.mark.parametrize("workdir, written", [("/w", "/w"), ("${SCRATCH}/w", "${SCRATCH}/w"), ("", None)])
def test_an_absolute_or_variable_workdir_is_written_and_empty_leaves_the_images(workdir, written, tmp_path):
    out = tmp_path / "e.toml"
    assert main(["edf", "--image", "/x/ok.sqsh", "--workdir", workdir, "-o", str(out)]) == 0
    assert tomllib.loads(out.read_text()).get("workdir") == written
