"""drs-json-c: Huawei DRS "JSON-C" messages to Kafka (Huawei DRS «Kafka消息格式»).

The same keys as drs-json; Huawei DRS «Kafka消息格式»:
"JSON-C格式与JSON格式类似,区别是对于删除操作,JSON数据放在old上,
JSON-C放在data上。对于timestamp类型数据转换成yyyy-mm-dd hh:mm:ss的字符串" — the DELETE image is in
``data`` and TIMESTAMP values are formatted wall-clock text, read in ``source.timezone``. Nothing in a
message tells JSON-C from JSON, so it is chosen by name only. See docs/dialects.md (drs-json-c).
"""

from __future__ import annotations

from typing import ClassVar

from replicator.dialects.drs_json import DrsJson


class DrsJsonC(DrsJson):
    name = "drs-json-c"
    detectable: ClassVar[bool] = False  # same keys as drs-json (Huawei DRS «Kafka消息格式»)
    delete_image: ClassVar[str] = "data"
    epoch_timestamps: ClassVar[bool] = False
