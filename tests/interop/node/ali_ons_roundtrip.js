// ali-ons (Node RocketMQ client) round trip against our name server and broker.
// Usage: NODE_PATH=<dir>/node_modules node ali_ons_roundtrip.js <namesrv> <topic> <group> <count>
// Prints one JSON line: {"sent": [...send results], "received": [...bodies]}.
'use strict';
const { Producer, Consumer, Message } = require('ali-ons');

const [nameSrv, topic, group, countText] = process.argv.slice(2);
const count = Number(countText || 5);
const base = { httpclient: {}, nameSrv: [nameSrv], accessKeyId: 'none', accessKeySecret: 'none' };

(async () => {
  const producer = new Producer({ ...base, producerGroup: `PID_${group}` });
  await producer.ready();
  const sent = [];
  for (let i = 0; i < count; i++) {
    const msg = new Message(topic, i % 2 ? 'TagB' : 'TagA', `ons ${i}`);
    msg.keys = [`k${i}`];
    const r = await producer.send(msg);
    sent.push({ status: r.sendStatus, queueId: r.messageQueue.queueId, offset: r.queueOffset });
  }
  const received = [];
  const consumer = new Consumer({ ...base, consumerGroup: `CID_${group}`, consumeFromWhere: 'CONSUME_FROM_FIRST_OFFSET' });
  const done = new Promise(resolve => {
    consumer.subscribe(topic, 'TagA || TagB', async msg => {
      received.push(msg.body.toString());
      if (received.length >= count) resolve();
    });
  });
  consumer.on('error', err => console.error('consumer error', err.message));
  await Promise.race([done, new Promise(r => setTimeout(r, 30000))]);
  console.log(JSON.stringify({ sent, received }));
  await consumer.close();
  await producer.close();
  process.exit(0);
})().catch(err => { console.error(err); process.exit(1); });
