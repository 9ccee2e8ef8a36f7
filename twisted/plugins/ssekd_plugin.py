"""twistd plugin: `twistd ssekd --config etc/zilla.yaml`. All the work is in ssekd.tap."""

from twisted.application.service import ServiceMaker

ssekd = ServiceMaker(
    "ssekd",
    "ssekd.tap",
    "Stream Kafka topics to browsers as Server-Sent Events (zilla.yaml)",
    "ssekd",
)
