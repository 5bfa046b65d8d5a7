"""iclr24: nineteen ICLR 2024 papers as reusable components, each with a CPU reproduction.

Methods live in subpackages named after each paper (``iclr24.hyperattention``, ...);
``iclr24.core`` holds the experiment contract, runner and report they share.
Importing ``iclr24`` needs only the core dependencies.
"""

__version__ = "0.1.0"
