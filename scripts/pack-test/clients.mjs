// node:http clients through LimitedHttpAgent (from `hostgate`): axios, got and the AWS SDK v3,
// one call each against the loopback partner, every permit back.
import assert from 'node:assert/strict';
import http from 'node:http';
import { GetObjectCommand, S3Client } from '@aws-sdk/client-s3';
import axios from 'axios';
import got from 'got';
import { HostLimiter, LimitedHttpAgent } from 'hostgate';

const partner = process.env.PARTNER;
const limiter = new HostLimiter({ partners: [{ name: 'billing', hosts: [partner], limit: 2 }] });
const agent = new LimitedHttpAgent(new http.Agent({ keepAlive: true }), limiter);
assert.equal((await axios.get(`${partner}/axios`, { httpAgent: agent })).data.ok, true);
assert.equal((await got(`${partner}/got`, { agent: { http: agent } }).json()).ok, true);
const s3 = new S3Client({
  endpoint: partner,
  forcePathStyle: true,
  region: 'us-east-1',
  credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
  maxAttempts: 1,
  requestHandler: { httpAgent: agent },
});
const object = await s3.send(new GetObjectCommand({ Bucket: 'b', Key: 'k' }));
assert.equal(JSON.parse(await object.Body.transformToString()).ok, true);
s3.destroy();
agent.destroy();
await limiter.gate('billing').onIdle(); // a permit returns as its response ends
const { acquired, released } = limiter.gate('billing').stats();
assert.deepEqual({ acquired, released }, { acquired: 3, released: 3 });
await limiter.close();
console.log('LimitedHttpAgent: axios, got and the AWS SDK v3 (S3), one call each');
