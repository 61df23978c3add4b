// MQTT.js (npm `mqtt`) driving MQTT 5 enhanced authentication with SCRAM.
//
//   node mqttjs_scram.js PORT METHOD USER PASSWORD
//
// CONNECT with the Authentication Method and the client-first message; the
// server's AUTH 0x18 (server-first) is answered from MQTT.js's handleAuth hook
// with the client-final message; the CONNACK's Authentication Data (the
// server-final message) is checked against the server signature. On success
// the client re-authenticates once (AUTH 0x19: MQTT.js has no public call to
// start one, so the packet goes through its internal _sendPacket; the rest of
// that exchange runs through handleAuth like the first), then publishes to
// itself at QoS 1. Prints one JSON line: what happened.
// The SCRAM client side is written here from RFC 5802 with node:crypto.
'use strict'

const crypto = require('node:crypto')
const mqtt = require('mqtt')

const [port, method, user, password] = process.argv.slice(2)
const hash = { 'SCRAM-SHA-256': 'sha256', 'SCRAM-SHA-512': 'sha512' }[method] || 'sha256'
const hmac = (key, msg) => crypto.createHmac(hash, key).update(msg).digest()

function scramClient () {
  const nonce = crypto.randomBytes(18).toString('base64')
  const bare = `n=${user},r=${nonce}`
  const self = { first: Buffer.from('n,,' + bare), serverSignature: null }
  self.final = (serverFirst) => {
    const attrs = Object.fromEntries(serverFirst.toString().split(',').map((kv) => [kv[0], kv.slice(2)]))
    if (!attrs.r.startsWith(nonce)) throw new Error('server nonce does not extend ours')
    const salted = crypto.pbkdf2Sync(password, Buffer.from(attrs.s, 'base64'), parseInt(attrs.i, 10),
      hash === 'sha256' ? 32 : 64, hash)
    const clientKey = hmac(salted, 'Client Key')
    const storedKey = crypto.createHash(hash).update(clientKey).digest()
    const withoutProof = `c=biws,r=${attrs.r}`
    const authMessage = `${bare},${serverFirst.toString()},${withoutProof}`
    const signature = hmac(storedKey, authMessage)
    const proof = Buffer.from(clientKey.map((b, i) => b ^ signature[i]))
    self.serverSignature = hmac(hmac(salted, 'Server Key'), authMessage)
    return Buffer.from(`${withoutProof},p=${proof.toString('base64')}`)
  }
  self.checkFinal = (serverFinal) =>
    serverFinal !== undefined && serverFinal.toString() === 'v=' + self.serverSignature.toString('base64')
  return self
}

const result = { connack: null, serverProved: false, reauth: null, reauthProved: false, received: null, error: null }
let scram = scramClient()
let done = false
const finish = (client) => {
  if (done) return
  done = true
  console.log(JSON.stringify(result))
  client.end(true)
  setImmediate(() => process.exit(0))
}

const client = mqtt.connect(`mqtt://127.0.0.1:${port}`, {
  protocolVersion: 5,
  clientId: 'mqttjs-scram',
  reconnectPeriod: 0,
  connectTimeout: 10000,
  properties: { authenticationMethod: method, authenticationData: scram.first }
})

client.handleAuth = (packet, callback) => {
  const data = packet.properties && packet.properties.authenticationData
  if (packet.reasonCode === 0x18) {
    callback(null, {
      cmd: 'auth',
      reasonCode: 0x18,
      properties: { authenticationMethod: method, authenticationData: scram.final(data) }
    })
  } else if (packet.reasonCode === 0x00) { // the end of a re-authentication
    result.reauth = 0
    result.reauthProved = scram.checkFinal(data)
    callback()
    client.subscribe('js/scram', { qos: 1 }, () => client.publish('js/scram', 'after re-auth', { qos: 1 }))
  } else {
    callback()
  }
}

client.on('connect', (connack) => {
  result.connack = connack.reasonCode
  result.serverProved = scram.checkFinal(connack.properties && connack.properties.authenticationData)
  scram = scramClient()
  client._sendPacket({
    cmd: 'auth',
    reasonCode: 0x19,
    properties: { authenticationMethod: method, authenticationData: scram.first }
  })
})
client.on('message', (topic, payload) => {
  result.received = payload.toString()
  finish(client)
})
client.on('disconnect', (packet) => {
  result.reauth = packet.reasonCode
  finish(client)
})
client.on('error', (err) => {
  result.error = err.code === undefined ? String(err.message) : err.code
  finish(client)
})
client.on('close', () => finish(client))
setTimeout(() => { result.error = 'timeout'; finish(client) }, 15000)
