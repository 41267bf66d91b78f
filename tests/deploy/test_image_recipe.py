"""deploy/image: the Dockerfile and scripts/image.sh take their packages from the one list and give
the image the same configuration (user, entrypoint, command, ports, volumes, working directory).
No Docker here: the Dockerfile's own awk programs are run on the list."""

import re
import shlex
import subprocess

import pytest

from deploy_common import ROOT

LIST = ROOT / "deploy/image/packages.txt"
DOCKERFILE = (ROOT / "deploy/image/Dockerfile").read_text()
IMAGE_SH = (ROOT / "scripts/image.sh").read_text()


def listed(kind: str, column: int) -> list:
    rows = [line.split() for line in LIST.read_text().splitlines() if line.strip() and not line.startswith("#")]
    assert all(len(r) == 3 for r in rows), "every row: KIND DEBIAN-NAME UBUNTU-NAME"
    return [r[column - 1] for r in rows if r[0] == kind and r[column - 1] != "-"]


def awk(program: str, *args: str) -> list:
    p = subprocess.run(["awk", *args, program, str(LIST)], capture_output=True, text=True, check=True)
    return p.stdout.split()


@pytest.mark.parametrize("kind", ["build", "run"])
@pytest.mark.parametrize("column", [2, 3])
def test_dockerfile_installs_the_list(kind, column):
    programs = re.findall(r"awk -v c=\"\$\{PACKAGE_COLUMN\}\" '([^']*\$1 == \"" + kind + r"\"[^']*)'", DOCKERFILE)
    assert len(programs) == 1, f"one awk program reads the {kind} packages"
    got = awk(programs[0], "-v", f"c={column}")
    assert got == listed(kind, column) and got


def test_image_sh_installs_the_same_run_packages():
    (program,) = re.findall(r"awk '([^']*\$1 == \"run\"[^']*)' \"\$LIST\"", IMAGE_SH)
    assert awk(program) == listed("run", 2)


def dockerfile_instruction(name: str) -> list:
    """An instruction of the Dockerfile's last (runtime) stage, its words."""
    runtime = DOCKERFILE[DOCKERFILE.rindex("\nFROM "):]
    (line,) = [ln for ln in runtime.splitlines() if ln.startswith(name + " ")]
    return shlex.split(line[len(name) + 1:].replace("[", "").replace("]", "").replace(",", " "))


def umoci_config(key: str) -> list:
    return re.findall(rf"--config\.{key} (\S+)", IMAGE_SH)


def test_both_recipes_configure_the_image_alike():
    assert dockerfile_instruction("USER") == umoci_config("user") == ["10001:10001"]
    assert dockerfile_instruction("WORKDIR") == umoci_config("workingdir") == ["/models"]
    assert dockerfile_instruction("ENTRYPOINT") == umoci_config("entrypoint") == ["/usr/local/bin/sampan", "serve"]
    assert dockerfile_instruction("CMD") == umoci_config("cmd") == ["--model-repository", "/models"]
    assert [f"{p}/tcp" for p in dockerfile_instruction("EXPOSE")] == umoci_config("exposedports")
    assert dockerfile_instruction("VOLUME") == umoci_config("volume") == ["/models", "/plans"]
    for recipe in (DOCKERFILE, IMAGE_SH):
        assert "groupadd --gid 10001 sampan" in recipe
        assert "useradd --uid 10001 --gid 10001 --no-create-home --home-dir /models --shell /usr/sbin/nologin sampan" in recipe
