"""The docs' Python blocks run as written: every block marked `<!-- doc: python -->` in
README.md, docs/*.md and this binding's README is run as a script, with a throwaway
redis-server's URL as its argv[1], and must exit 0 (the repo's tests/doc_blocks.py finds
them, and fails on a block that has no marker). Every block marked `<!-- doc: sh -->`
(the install commands) runs with `sh -e` in a clean copy of the checkout, offline, and
must exit 0."""
import os
import subprocess
import sys

import pytest

import xfetch.testing

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tests"))
import doc_blocks  # noqa: E402  (the repo's tests/doc_blocks.py)

from test_install import clean_copy  # noqa: E402

BLOCKS = [b for b in doc_blocks.all_blocks(REPO) if b.kind == "python"]
SH_BLOCKS = [b for b in doc_blocks.all_blocks(REPO) if b.kind == "sh"]


def test_the_docs_have_python_blocks_and_every_block_is_marked():
    assert len(BLOCKS) >= 4, [b.where for b in BLOCKS]
    assert doc_blocks.check_markers(REPO) == []


@pytest.fixture(scope="module")
def own_server():
    """A server of its own: the examples use keys such as user:42 freely."""
    with xfetch.testing.RedisServer() as server:
        yield server


@pytest.mark.parametrize("block", BLOCKS, ids=[b.where for b in BLOCKS])
def test_python_block_runs_as_written(block, own_server, tmp_path):
    script = tmp_path / "block.py"
    script.write_text(block.text)
    out = subprocess.run([sys.executable, str(script), own_server.url], capture_output=True,
                         text=True, timeout=60, cwd=tmp_path)
    assert out.returncode == 0, f"{block.where}:\n{out.stdout}\n{out.stderr}"


@pytest.mark.parametrize("block", SH_BLOCKS, ids=[b.where for b in SH_BLOCKS])
def test_sh_block_runs_as_written(block, tmp_path):
    checkout = tmp_path / "xfetch"
    clean_copy(str(checkout))
    script = tmp_path / "block.sh"
    script.write_text(block.text)
    env = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.pop("XFETCH_PREFIX", None)
    env.pop("XFETCH_SOURCE_DIR", None)
    out = subprocess.run(["sh", "-e", str(script)], cwd=str(checkout), env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         timeout=900)
    assert out.returncode == 0, f"{block.where}:\n{out.stdout[-5000:]}"
