"""The figures of the report, one module per family of figures; common.py holds what they
share (each method's style, the r² cells, saving)."""
