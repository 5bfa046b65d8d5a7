"""Run untrusted code (programs a language model wrote): ``run_python`` and ``run_pytest``.

    from iclr24.sandbox import run_python
    result = run_python("print(2 + 2)", timeout_s=5)
    result.stdout, result.exit_code, result.timed_out

Rule of the house: code that a model generated runs only through this package. See
docs/sandbox.md for what is contained and how.
"""

from iclr24.sandbox.runner import ExecResult, run_pytest, run_python

__all__ = ["ExecResult", "run_pytest", "run_python"]
