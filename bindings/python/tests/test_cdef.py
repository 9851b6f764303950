"""The cdef mirrors include/xfetch.h (and its parts, include/xfetch/*.h): every
public function and code is bound."""
import os
import re

import pytest

import xfetch

INCLUDE = os.path.join(os.path.dirname(__file__), "..", "..", "..", "include")
HEADER = os.path.join(INCLUDE, "xfetch.h")


def _public_header():
    """The umbrella's text followed by that of every part it includes
    (include/xfetch/*.h)."""
    with open(HEADER) as f:
        text = f.read()
    parts = re.findall(r'^#include "(xfetch/\w+\.h)"', text, re.M)
    assert parts, "xfetch.h includes its parts"
    for part in parts:
        with open(os.path.join(INCLUDE, part)) as f:
            text += f.read()
    return text


@pytest.mark.skipif(not os.path.exists(HEADER), reason="not in the source tree")
def test_every_public_function_and_code_is_bound():
    text = _public_header()
    functions = re.findall(r"XF_EXPORT[^;(]*?\b(xf_\w+)\s*\(", text)
    assert len(functions) >= 13
    for name in functions:
        assert hasattr(xfetch.lib, name), name
    for name, code in re.findall(r"XF_ERR\((\w+), (-\d+),", text):
        assert getattr(xfetch.lib, "XF_" + name) == int(code)
        assert xfetch.check.__module__  # and every code maps to an Error subclass:
        assert issubclass(type(xfetch._errors.error_for(int(code))), xfetch.Error)
        assert type(xfetch._errors.error_for(int(code))) is not xfetch.Error, name
