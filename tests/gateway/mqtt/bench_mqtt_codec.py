"""Codec throughput for a 100-byte PUBLISH (not a test; run it by hand).

    .venv/bin/python tests/gateway/mqtt/bench_mqtt_codec.py

Decode goes through MQTTConnection (100 packets per receive_data, as one
socket read would deliver them); encode is ``encode(event, version)``;
template is ``PublishTemplate.render`` (QoS 1) or ``.data`` (QoS 0).
Numbers are packets per second, best of 5 runs.
"""

import timeit

from gateway.mqtt import ConnAck, Connect, MQTTConnection, Publish, PublishTemplate, encode

N = 20_000


def main() -> None:
    for version in (4, 5):
        for qos in (0, 1):
            topic = "devices/abc123/telemetry"
            overhead = 2 + 2 + len(topic) + (2 if qos else 0) + (1 if version == 5 else 0)
            pub = Publish(topic=topic, payload=b"x" * (100 - overhead), qos=qos, packet_id=7 if qos else None)
            packet = encode(pub, version)
            assert len(packet) == 100
            batch = packet * 100

            def decode():
                conn = MQTTConnection()
                conn.receive_data(encode(Connect(protocol_version=version, client_id="b"), version))
                conn.events()
                conn.send(ConnAck())
                for _ in range(N // 100):
                    conn.receive_data(batch)
                    conn.events()

            def enc():
                for _ in range(N):
                    encode(pub, version)

            tpl = PublishTemplate(pub, version)

            def render():
                if qos:
                    for i in range(1, N + 1):
                        tpl.render(i)
                else:
                    for _ in range(N):
                        tpl.data

            rates = [N / min(timeit.repeat(f, number=1, repeat=5)) for f in (decode, enc, render)]
            print(f"MQTT {version} QoS {qos} 100-byte PUBLISH: decode {rates[0]:,.0f}/s  "
                  f"encode {rates[1]:,.0f}/s  template {rates[2]:,.0f}/s")


if __name__ == "__main__":
    main()
