"""The docs' Python blocks run as written: every block marked `<!-- doc: python -->` in
README.md, docs/*.md and this binding's README is run as a script, with a throwaway
redis-server's URL as its argv[1], and must exit 0 (the repo's tests/doc_blocks.py finds
them, and fails on a block that has no marker)."""
import os
import subprocess
import sys

import pytest

import xfetch.testing

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tests"))
import doc_blocks  # noqa: E402  (the repo's tests/doc_blocks.py)

BLOCKS = [b for b in doc_blocks.all_blocks(REPO) if b.kind == "python"]


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
