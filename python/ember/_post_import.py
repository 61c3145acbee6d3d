"""Post-import hooks: run a function right after a module is first imported, so that
``import ember`` can register itself with a framework (Dynamo's backend registry,
Lightning's accelerator registry) without importing that framework."""

import importlib.abc
import importlib.util
import sys


class _AfterImport(importlib.abc.MetaPathFinder):
    def __init__(self, name, fn):
        self.name, self.fn = name, fn

    def find_spec(self, name, path, target=None):
        if name != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module
        fn = self.fn

        def exec_and_call(module):
            exec_module(module)
            fn()

        spec.loader.exec_module = exec_and_call
        return spec


def when_imported(name: str, fn) -> None:
    """Calls ``fn()`` now if module ``name`` is imported, else right after its first
    import completes (once; a second call for the same ``name`` is ignored)."""
    if name in sys.modules:
        fn()
    elif not any(isinstance(f, _AfterImport) and f.name == name for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(name, fn))
