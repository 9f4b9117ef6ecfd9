"""Every public exception of traintrace derives from :class:`streams.errors.TraintraceError`,
so a user can catch ours (and only ours) in one clause."""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect
import pkgutil
from pathlib import Path

import streams
from streams.errors import TraintraceError

#: raised on purpose by the stdlib's rules, not ours to root (private control-flow exceptions
#: start with an underscore and are skipped)
ALLOWED: set[str] = set()


#: a module importing one of these at its top is read, not imported (importing PyTorch, Ray and
#: Lightning took most of the unit run's longest test: 10 s)
FRAMEWORKS = {"torch", "ray", "transformers", "pytorch_lightning", "lightning"}


def _module_tree(name: str) -> ast.Module | None:
    """The source of module ``name`` parsed (None: no source file, e.g. a folder of data)."""
    path = Path(streams.__path__[0]).joinpath(*name.split(".")[1:])
    path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    return ast.parse(path.read_text(), str(path)) if path.is_file() else None


def _top_level(body: list[ast.stmt]):
    """The statements run at import: the module's, and those of its top-level ``try`` and ``if``."""
    for node in body:
        yield node
        if isinstance(node, ast.Try):
            yield from _top_level(node.body)
        elif isinstance(node, ast.If):
            yield from _top_level(node.body + node.orelse)


def _imports_a_framework(tree: ast.Module | None) -> bool:
    if tree is None:
        return False
    for node in _top_level(tree.body):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] in FRAMEWORKS for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] in FRAMEWORKS:
            return True
    return False


def _read_exceptions(name: str, tree: ast.Module) -> dict:
    """The exception classes of a module that imports a training framework, found in its source:
    a class whose base is a builtin exception, or one imported from ``streams`` that is one."""
    imported = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("streams"):
            for a in node.names:
                imported[a.asname or a.name] = (node.module, a.name)
    seen = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef) or node.name.startswith("_"):
            continue
        for base in node.bases:
            if not isinstance(base, ast.Name):
                continue
            cls = getattr(builtins, base.id, None)
            if base.id in imported:
                module, attr = imported[base.id]
                cls = getattr(importlib.import_module(module), attr, None)
            if inspect.isclass(cls) and issubclass(cls, BaseException):
                # its bases decide: a subclass of a TraintraceError is one
                seen[f"{name}.{node.name}"] = type(node.name, (cls,), {})
    return seen


def test_the_framework_modules_are_read_for_exceptions_too():
    tree = ast.parse("from streams.integrations.errors import IntegrationError\ntry:\n    import torch\nexcept ImportError:\n    pass\n"
                     "class Refused(RuntimeError): pass\nclass Ours(IntegrationError): pass\nclass Plain: pass\n")
    assert _imports_a_framework(tree)
    found = _read_exceptions("m", tree)
    assert sorted(found) == ["m.Ours", "m.Refused"]
    assert issubclass(found["m.Ours"], TraintraceError) and not issubclass(found["m.Refused"], TraintraceError)


def _public_exceptions():
    seen = {}
    for info in pkgutil.walk_packages(streams.__path__, "streams."):
        if info.name.endswith("__main__") or ".cli" in info.name:
            continue
        tree = _module_tree(info.name)
        if tree is not None and _imports_a_framework(tree):
            seen.update(_read_exceptions(info.name, tree))
            continue
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if (inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == info.name
                    and not name.startswith("_")):
                seen[f"{info.name}.{name}"] = obj
    return seen


def test_every_public_exception_is_a_traintrace_error():
    found = _public_exceptions()
    assert len(found) >= 20
    stray = sorted(n for n, cls in found.items() if not issubclass(cls, TraintraceError) and n not in ALLOWED)
    assert not stray, f"derive these from a TraintraceError family: {stray}"


def test_families_stay_what_callers_catch():
    from streams.codec import DecodeError
    from streams.files.jsonl import JsonlError
    from streams.devtools.broker import BrokerError
    from streams.kafka.errors import KafkaAdapterError
    from streams.kafka.reader import ReaderError

    assert issubclass(DecodeError, ValueError)  # callers catch ValueError for bad bytes too
    assert issubclass(BrokerError, KafkaAdapterError) and issubclass(ReaderError, KafkaAdapterError)
    assert issubclass(JsonlError, TraintraceError)
