"""The room's public surface, and its promise of no I/O imports."""

import ast
import pathlib

import gateway.mqtt as mqtt
from gateway.mqtt._properties import FIELDS
from gateway.mqtt._events import EVENT_FIELDS, EVENT_TYPES, Will
from gateway.mqtt._wire import WILL

ROOM = pathlib.Path(mqtt.__file__).parent
FORBIDDEN = {"trio", "socket", "asyncio", "selectors", "time", "threading", "ssl"}


def test_all_names_exist_and_are_public():
    for name in mqtt.__all__:
        assert hasattr(mqtt, name), name
        assert not name.startswith("_")


def test_public_objects_are_documented():
    for name in mqtt.__all__:
        obj = getattr(mqtt, name)
        if callable(obj) and obj.__doc__ is None:
            raise AssertionError(f"{name} has no docstring")


def test_no_io_or_clock_imports():
    for path in ROOM.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module]
            else:
                continue
            for name in names:
                assert name.split(".")[0] not in FORBIDDEN, f"{path.name} imports {name}"


def test_every_module_has_a_docstring_and_a_sane_size():
    for path in ROOM.glob("*.py"):
        text = path.read_text()
        assert ast.get_docstring(ast.parse(text)), path.name
        assert len(text.splitlines()) <= 450, path.name


def test_every_property_field_exists_on_its_event():
    for kind, cls in EVENT_TYPES.items():
        for name in FIELDS[kind]:
            assert name in EVENT_FIELDS[cls], (cls.__name__, name)
    will_fields = {f for f in Will.__dataclass_fields__}
    assert set(FIELDS[WILL]) <= will_fields
