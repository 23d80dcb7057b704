"""LAYERS of the tiny model and the decode stage run on the validation fixture's states and maps."""

from jtc.files.io import read_table
from jtc.stages.prediction import decode_predictions

LAYERS = 3


def decode(work, method, maps, name):
    out = work / f"{name}.parquet"
    decode_predictions(
        str(work / "m"),
        str(work / "val"),
        {method: maps},
        {method: str(out)},
        model="tiny",
        top_k=10,
        threads=1,
    )
    return read_table(out)
