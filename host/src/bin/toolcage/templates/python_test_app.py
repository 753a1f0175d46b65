"""The tool's logic, natively: `python3 test_app.py`."""

from app import {function}
from toolcage import ToolError

assert {function}("a b A", top=1) == {"words": 3, "top": [("a", 2)]}
try:
    {function}("a", top=0)
    raise AssertionError("top=0 was accepted")
except ToolError as error:
    assert "at least 1" in str(error)
print("ok")
