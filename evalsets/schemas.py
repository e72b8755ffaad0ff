from datetime import datetime

from ninja import Schema


class DatasetOut(Schema):
    id: int
    name: str
    kind: str
    description: str
    sha256: str
    size_bytes: int
    item_count: int
    labelled: bool
    class_counts: dict[str, int]
    samples: list[dict]  # thumbnails as data URIs (images) or the first texts
    created_at: datetime
