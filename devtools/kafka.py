"""A private Apache Kafka broker (KRaft, one node) on loopback for tests and the demo.

Runs Apache Kafka's own jars from Maven Central (``make jars`` puts them in
.jars/kafka): the log directory is formatted with ``kafka.tools.StorageTool`` and the
broker started with ``kafka.Kafka``.
"""

from __future__ import annotations

import base64
import socket
import subprocess
import time
import uuid
from pathlib import Path

from devtools.mariadb import free_port

REPO = Path(__file__).resolve().parent.parent
KAFKA_JARS = REPO / ".jars" / "kafka"


class KafkaBroker:
    def __init__(self, base_dir: Path, port: int | None = None) -> None:
        self.base_dir = Path(base_dir)
        self.port = port or free_port()
        self.controller_port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _java(self, main: str, *args: str) -> list[str]:
        if not any(KAFKA_JARS.glob("kafka_*.jar")):
            raise RuntimeError(f"no Kafka jars in {KAFKA_JARS}: run `make jars`")
        return ["java", "-Xmx512m", "-cp", f"{KAFKA_JARS}/*", main, *args]

    def start(self, timeout: float = 90.0) -> None:
        self.base_dir.mkdir(parents=True, exist_ok=True)
        logs = self.base_dir / "logs"
        props = self.base_dir / "server.properties"
        props.write_text(
            "\n".join(
                [
                    "process.roles=broker,controller",
                    "node.id=1",
                    f"controller.quorum.voters=1@127.0.0.1:{self.controller_port}",
                    f"listeners=PLAINTEXT://127.0.0.1:{self.port},"
                    f"CONTROLLER://127.0.0.1:{self.controller_port}",
                    f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.port}",
                    "controller.listener.names=CONTROLLER",
                    "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                    "inter.broker.listener.name=PLAINTEXT",
                    f"log.dirs={logs}",
                    "offsets.topic.replication.factor=1",
                    "transaction.state.log.replication.factor=1",
                    "transaction.state.log.min.isr=1",
                    "group.initial.rebalance.delay.ms=0",
                    "num.partitions=2",
                    "auto.create.topics.enable=false",
                ]
            )
            + "\n"
        )
        if not logs.exists():
            cluster_id = (
                base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
            )
            # "--cluster-id=ID": a base64 id may start with '-' and read as an option
            subprocess.run(
                self._java(
                    "kafka.tools.StorageTool",
                    "format",
                    f"--cluster-id={cluster_id}",
                    "-c",
                    str(props),
                ),
                check=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        log = open(self.base_dir / "broker.log", "ab")
        self.process = subprocess.Popen(
            self._java("kafka.Kafka", str(props)),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while not self._ready():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"Kafka did not start; see {self.base_dir / 'broker.log'}"
                )
            time.sleep(0.5)

    def _ready(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                pass
        except OSError:
            return False
        try:
            from kafka.admin import KafkaAdminClient

            KafkaAdminClient(bootstrap_servers=self.bootstrap).close()
            return True
        except Exception:
            return False

    def create_topic(self, name: str, partitions: int = 2) -> None:
        from kafka.admin import KafkaAdminClient, NewTopic

        admin = KafkaAdminClient(bootstrap_servers=self.bootstrap)
        try:
            admin.create_topics(
                [NewTopic(name, num_partitions=partitions, replication_factor=1)]
            )
        finally:
            admin.close()

    def producer(self):
        from kafka import KafkaProducer

        return KafkaProducer(bootstrap_servers=self.bootstrap, acks="all", linger_ms=5)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
