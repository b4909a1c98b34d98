"""Every public name of the package says what it does: each class and
function mdr exports, and each public method and property of those classes
(help(mdr.Arena.zero_all) must answer). mdr.torch is read from its source
(importing it needs torch), its public classes, functions and their public
members alike."""
import ast
import inspect
import os

import mdr


def _missing_in_module():
    missing = []
    for name in mdr.__all__:
        obj = getattr(mdr, name)
        if not (inspect.isclass(obj) or inspect.isfunction(obj)):
            continue  # constants: documented where the module defines them
        if not (obj.__doc__ or "").strip():
            missing.append(name)
        if not inspect.isclass(obj):
            continue
        for klass in obj.__mro__:
            if klass is object or klass.__module__ == "builtins" or not klass.__module__.startswith("mdr"):
                continue
            for member, value in vars(klass).items():
                if member.startswith("_"):
                    continue
                if isinstance(value, (staticmethod, classmethod)):
                    value = value.__func__
                if not (inspect.isfunction(value) or isinstance(value, property)):
                    continue  # fields and constants
                if not (value.__doc__ or "").strip():
                    missing.append("%s.%s" % (name, member))
    return sorted(set(missing))


def _missing_in_source(path):
    tree = ast.parse(open(path).read())
    missing = []

    def visit(node, prefix):
        for child in node.body:
            if isinstance(child, (ast.FunctionDef, ast.ClassDef)) and not child.name.startswith("_"):
                if ast.get_docstring(child) is None:
                    missing.append(prefix + child.name)
                if isinstance(child, ast.ClassDef):
                    visit(child, prefix + child.name + ".")

    visit(tree, "")
    return missing


def test_every_exported_class_function_method_and_property_has_a_docstring():
    missing = _missing_in_module()
    assert not missing, "without a docstring: " + ", ".join(missing)


def test_every_public_name_of_mdr_torch_has_a_docstring():
    path = os.path.join(os.path.dirname(mdr.__file__), "torch.py")
    missing = _missing_in_source(path)
    assert not missing, "mdr.torch, without a docstring: " + ", ".join(missing)


def test_the_check_sees_a_missing_docstring():
    """The walk above finds an undocumented public method (so a pass means
    something): a class made here without one is named."""

    class Probe:
        """documented"""

        def undocumented(self):
            return 1

        @property
        def bare(self):
            return 2

    saved = mdr.__all__
    mdr.Probe = Probe
    Probe.__module__ = "mdr._probe"
    try:
        mdr.__all__ = list(saved) + ["Probe"]
        missing = _missing_in_module()
    finally:
        mdr.__all__ = saved
        del mdr.Probe
    assert "Probe.undocumented" in missing and "Probe.bare" in missing
