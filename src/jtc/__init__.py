"""jtc: linear shortcuts between transformer layers ("Jump to Conclusions")."""

__version__ = "0.1.0"
