"""The tool's logic, natively: `python3 test_app.py`."""

from app import default_top, {function}
from toolcage import ToolError

assert {function}("a b A", top=1) == {"words": 3, "top": [("a", 2)]}
# Natively there are no settings: `top` defaults to 3.
assert {function}("a b A") == {"words": 3, "top": [("a", 2), ("b", 1)]}
assert default_top(None) == 3 and default_top("5") == 5
for bad in ("0", "five", ""):
    try:
        default_top(bad)
        raise AssertionError(f"default_top={bad!r} was accepted")
    except ToolError as error:
        assert "at least 1" in str(error)
try:
    {function}("a", top=0)
    raise AssertionError("top=0 was accepted")
except ToolError as error:
    assert "at least 1" in str(error)
print("ok")
