// The npm rocketmq-client-nodejs (5.x, gRPC) against mqgate: argv = endpoint topic group.
// Sends a normal message (tag, keys, property) and a FIFO one, receives and acks both
// with a SimpleConsumer, then sends one more that it does not ack, and receives it again.
// Prints one JSON line with what the client saw.
const { Producer, SimpleConsumer } = require('rocketmq-client-nodejs');

const [endpoint, topic, group] = process.argv.slice(2);

async function receiveUntil(consumer, count, invisibleMs, ack) {
  const got = [];
  const t0 = Date.now();
  while (got.length < count && Date.now() - t0 < 30000) {
    for (const m of await consumer.receive(16, invisibleMs)) {
      got.push({ body: m.body.toString(), tag: m.tag, keys: m.keys, properties: Object.fromEntries(m.properties),
                 attempt: m.deliveryAttempt, id: m.messageId, group: m.messageGroup || null });
      if (ack) await consumer.ack(m);
    }
  }
  return got;
}

(async () => {
  const out = { sent: [] };
  const producer = new Producer({ endpoints: endpoint });
  await producer.startup();
  out.sent.push((await producer.send({ topic, tag: 'TagN', keys: ['k1'], properties: new Map([['color', 'blue']]),
                                       body: Buffer.from('from node') })).messageId);
  out.sent.push((await producer.send({ topic, messageGroup: 'g1', body: Buffer.from('fifo from node') })).messageId);
  const consumer = new SimpleConsumer({ consumerGroup: group, endpoints: endpoint,
                                        subscriptions: new Map().set(topic, '*'), awaitDuration: 3000 });
  await consumer.startup();
  out.got = await receiveUntil(consumer, 2, 30000, true);
  await producer.send({ topic, body: Buffer.from('not acked') });
  out.first = await receiveUntil(consumer, 1, 2000, false);
  out.again = await receiveUntil(consumer, 1, 30000, true);
  await consumer.shutdown();
  await producer.shutdown();
  console.log(JSON.stringify(out));
  process.exit(0);
})().catch((e) => { console.error((e && e.stack) || e); process.exit(1); });
