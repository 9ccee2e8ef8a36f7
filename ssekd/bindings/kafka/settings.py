"""The librdkafka configuration a kafka client binding's options make: the consumers', the
producers' and the admin client's, and the check that librdkafka accepts them before the daemon
listens (`refused_property`, `refused_producer_property`).

Security comes from three places, all mapped here: `sasl` (or an `authorization` naming an
inline guard, resolved to the same thing by `ssekd.bindings.kafka.way_out`) gives the SASL
mechanism, user name and password; a tls client as the exit gives TLS and what to trust
(`TlsTrust`: the vault's certificates as `ssl.ca.pem`, in memory, or the system's CAs); and
`properties` may say TLS with `ssl.*` keys of their own.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer

from ssekd.bindings.kafka.librdkafka import close_consumer
from ssekd.bindings.kafka.producer import (
    ACKS,
    DEFAULT_MAX_INFLIGHT_BYTES,
    PRODUCER_DEFAULTS,
    PRODUCER_FIXED,
)
from ssekd.bindings.kafka.stall import DEFAULT_STALL_TIMEOUT

#: History reads queued or running at once, unless the client's options say otherwise.
DEFAULT_MAX_HISTORY_READS = 64
#: librdkafka log levels (syslog: 3 error, 4 warning) that reach the event log; `properties`
#: may ask for more (`log_level: 7` with `debug: broker`).
LOG_LEVEL = 4
#: Reconnect back-off defaults (ms), unless `properties` set them: librdkafka's own maximum, and
#: a start that keeps its retries, while every broker is down, to about four a second.
RECONNECT_BACKOFF = 500
RECONNECT_BACKOFF_MAX = 10_000


@dataclass(frozen=True)
class TlsTrust:
    """TLS to the brokers, from the tls client on the kafka client's way out."""

    #: The certificates a broker's must chain to, as PEM (`ssl.ca.pem`); None: the system's CA
    #: certificates (`trustcacerts: true`: librdkafka's `ssl.ca.location: probe`).
    ca_pem: str | None
    #: The tls client it came from, for messages.
    via: str


@dataclass
class ClientSettings:
    """What the binding's options say about reaching the cluster."""

    servers: tuple[str, ...]
    sasl: Mapping[str, str] | None = None
    #: librdkafka properties (options.properties), e.g. `fetch.wait.max.ms`.
    properties: Mapping[str, Any] = field(default_factory=dict)
    metadata_interval: float = 5.0
    max_history_reads: int = DEFAULT_MAX_HISTORY_READS
    #: librdkafka producer properties (options.producer-properties), e.g. `linger.ms`.
    producer_properties: Mapping[str, Any] = field(default_factory=dict)
    #: Bytes of produced records not yet acknowledged, at most (options.max-inflight-bytes).
    max_inflight_bytes: int = DEFAULT_MAX_INFLIGHT_BYTES
    #: Seconds a partition with records waiting may go without one before the tail consumer
    #: is replaced (options.stall-timeout, `ssekd.bindings.kafka.stall`).
    stall_timeout: float = DEFAULT_STALL_TIMEOUT
    #: TLS from a tls client on the way out (its exit), or None.
    tls: TlsTrust | None = None

    def consumer_config(self, group: str) -> dict[str, Any]:
        conf: dict[str, Any] = {
            "bootstrap.servers": ",".join(self.servers),
            "group.id": group,  # librdkafka wants one; we only assign, never join a group
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 100,
            "fetch.queue.backoff.ms": 5,
            "queued.max.messages.kbytes": 16384,
            "reconnect.backoff.ms": RECONNECT_BACKOFF,
            "reconnect.backoff.max.ms": RECONNECT_BACKOFF_MAX,
            "socket.keepalive.enable": True,
            "log_level": LOG_LEVEL,
        }
        if self.sasl:
            conf.update({
                "sasl.mechanism": self.sasl["mechanism"].upper(),
                "sasl.username": self.sasl["username"],
                "sasl.password": self.sasl["password"],
            })
        if self.tls is not None:
            if self.tls.ca_pem is not None:
                conf["ssl.ca.pem"] = self.tls.ca_pem
            else:
                conf["ssl.ca.location"] = "probe"
        conf.update(self.properties)
        if "reconnect.backoff.ms" not in self.properties:  # librdkafka wants start <= maximum
            conf["reconnect.backoff.ms"] = min(int(conf["reconnect.backoff.ms"]),
                                               int(conf["reconnect.backoff.max.ms"]))
        protocol = self.security_protocol()
        if protocol is not None:
            conf["security.protocol"] = protocol
        return conf

    def security_protocol(self) -> str | None:
        """librdkafka's `security.protocol`, or None for its default (plaintext).

        A tls client as the exit means TLS; otherwise `properties` say whether the cluster
        speaks it: an explicit `security.protocol`, or any `ssl.*` key (a CA, a client
        certificate), which librdkafka would otherwise silently ignore over plaintext. A `sasl`
        block adds SASL on top of that: `SASL_SSL` over TLS, `SASL_PLAINTEXT` otherwise - never
        plaintext credentials to a TLS-only cluster. (A tls exit beside an explicit plaintext
        protocol is refused when the binding is built: `way_out`.)"""
        explicit = self.properties.get("security.protocol")
        if self.tls is not None:
            tls = True
        elif explicit is not None:
            tls = str(explicit).lower() in ("ssl", "sasl_ssl")
        else:
            tls = any(str(k).startswith("ssl.") for k in self.properties)
        if self.sasl:
            return "SASL_SSL" if tls else "SASL_PLAINTEXT"
        if explicit is not None and self.tls is None:
            return str(explicit)
        return "SSL" if tls else None

    def producer_config(self, acks: str) -> dict[str, Any]:
        """The conf of the producer for `acks` (a Zilla acks name): the consumer's servers and
        security settings, our defaults, idempotence where the acks allow it, then
        `producer-properties`."""
        conf = self.admin_config(self.consumer_config("ssekd-producer"))
        conf.update(PRODUCER_DEFAULTS)
        conf["acks"] = ACKS[acks]
        conf["enable.idempotence"] = ACKS[acks] == "all"
        conf.update(self.producer_properties)
        conf.update(PRODUCER_FIXED)
        return conf

    def admin_config(self, consumer: Mapping[str, Any]) -> dict[str, Any]:
        """The admin client's conf from the consumer's: the same servers, every security
        setting (`security.*`, `ssl.*`, `sasl.*`), so it reaches a TLS or SASL cluster too, and
        the same log."""
        return {k: v for k, v in consumer.items()
                if k in ("bootstrap.servers", "logger", "log_level")
                or k.startswith(("security.", "ssl.", "sasl."))}

    def backoff(self, conf: Mapping[str, Any]) -> tuple[float, float]:
        """(first, longest) rest in seconds between consumers while every broker is down."""
        longest = float(conf.get("reconnect.backoff.max.ms", RECONNECT_BACKOFF_MAX)) / 1000
        first = float(conf.get("reconnect.backoff.ms", RECONNECT_BACKOFF)) / 1000
        return max(0.01, min(first, longest)), max(0.01, longest)


def refused_property(settings: ClientSettings) -> tuple[str | None, str] | None:
    """Why librdkafka refuses the consumer config these settings make, if it does: the property
    its message names (when it is one of `properties`) and the message, values hidden.

    librdkafka checks properties only when a client is made with them; the consumer thread
    would then die at start. A consumer made here without servers (it connects to nothing)
    lets a bad property stop the daemon before it listens, as any config error does.
    """
    conf = settings.consumer_config("ssekd-check")
    conf.pop("bootstrap.servers", None)
    conf["log_level"] = 0
    try:
        consumer = Consumer(conf)
    except (KafkaException, ValueError, TypeError) as e:
        return _refusal(e, settings.properties,
                        [*settings.properties.values(), *(settings.sasl or {}).values()])
    close_consumer(consumer)
    return None


def refused_producer_property(settings: ClientSettings) -> tuple[str | None, str] | None:
    """`refused_property` for the producer's config (`producer-properties`): a producer made
    without servers checks them before the daemon listens. One of ours that the write path
    depends on (`PRODUCER_FIXED`: it never creates topics) cannot be set otherwise."""
    for name, value in PRODUCER_FIXED.items():
        if name in settings.producer_properties and \
                str(settings.producer_properties[name]).lower() != str(value).lower():
            return name, (f"{name} is {str(value).lower()} for ssekd's producers: a write "
                          f"names a topic the cluster has, and never creates one")
    for acks in ACKS:
        conf = settings.producer_config(acks)
        conf.pop("bootstrap.servers", None)
        conf["log_level"] = 0
        try:
            producer = Producer(conf)
        except (KafkaException, ValueError, TypeError) as e:
            return _refusal(e, settings.producer_properties,
                            [*settings.producer_properties.values(),
                             *settings.properties.values(), *(settings.sasl or {}).values()])
        del producer
    return None


def _refusal(error: Exception, properties: Mapping[str, Any],
             secrets: list[Any]) -> tuple[str | None, str]:
    """librdkafka's refusal as (the first of `properties` its message names, the message),
    every value of `secrets` (3 characters or more) hidden from the message."""
    first = error.args[0] if error.args else None
    reason = str(first.str() if isinstance(first, KafkaError) else error)
    for value in {str(v) for v in secrets if len(str(v)) >= 3}:
        reason = reason.replace(value, "…")
    named = [k for k in properties if re.search(rf"(?<![\w.]){re.escape(k)}(?![\w.])", reason)]
    return (named[0] if named else None), reason
