/**
 * The media worker's voice-link fast paths (src/bridge/worker-voice-link.ts): the input_audio
 * message built as bytes and the response_audio samples read from bytes must mean exactly what
 * the JSON does, and anything of another shape must fall back to the JSON path.
 */
import { randomInt } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
import WebSocket, { WebSocketServer } from 'ws';
import { inputAudioMessage, responseAudioPcm } from '../../src/bridge/worker-voice-link.ts';
import { pcm16ToBase64 } from '../../src/media/pcm.ts';
import { serializeServerEvent } from '../../src/session/protocol.ts';

const frame = (n: number) => Int16Array.from({ length: n }, () => randomInt(-32768, 32768));

describe('worker voice link: input_audio as bytes', () => {
  it('is the JSON input_audio message of the frame', () => {
    for (const n of [480, 1, 2, 3, 0]) {
      const f = frame(n);
      const msg = inputAudioMessage(f);
      expect(JSON.parse(msg.toString('utf8'))).toEqual({ type: 'input_audio', data: { audio: pcm16ToBase64(f) } });
    }
  });
});

describe('worker voice link: one input_audio buffer per call, rewritten every frame', () => {
  it('every message that reaches a real server is its own frame, even when the socket queues them', async () => {
    const N = 3000; // ~4 MB: more than loopback's socket buffers hold while the server does not read
    const wss = new WebSocketServer({ host: '127.0.0.1', port: 0, perMessageDeflate: false });
    await new Promise((r) => wss.once('listening', r));
    const got: string[] = [];
    let server: WebSocket | undefined;
    const all = new Promise<void>((resolve) =>
      wss.on('connection', (s, req) => {
        server = s;
        req.socket.pause(); // nothing is read until every frame was sent
        s.on('message', (m) => got.push(m.toString()) === N && resolve());
      }),
    );
    const ws = new WebSocket(`ws://127.0.0.1:${(wss.address() as AddressInfo).port}`, { perMessageDeflate: false });
    try {
      await new Promise((r) => ws.once('open', r));
      await until(() => server !== undefined);
      const frames = Array.from({ length: N }, () => frame(480));
      let buf: Buffer | undefined;
      for (const f of frames) {
        buf = inputAudioMessage(f, buf);
        ws.send(buf, { binary: false });
      }
      expect(ws.bufferedAmount).toBeGreaterThan(0); // the writes did queue
      (server as unknown as { _socket: { resume(): void } })._socket.resume();
      await all;
      const audio = got.map((m) => (JSON.parse(m) as { data: { audio: string } }).data.audio);
      expect(audio.every((a, i) => a === pcm16ToBase64(frames[i]!))).toBe(true);
    } finally {
      ws.close();
      await new Promise((r) => wss.close(r));
    }
  });
});

async function until(f: () => boolean): Promise<void> {
  for (let i = 0; i < 200 && !f(); i++) await new Promise((r) => setTimeout(r, 10));
}

describe('worker voice link: response_audio from bytes', () => {
  const scratch = { buffer: Buffer.alloc(0) };
  it('reads the samples of what the voice server sends', () => {
    for (const n of [960, 1, 0]) {
      const f = frame(n);
      for (const isFinal of [false, true]) {
        const raw = Buffer.from(serializeServerEvent({ type: 'response_audio', data: { turn_id: 't"audio":"x', audio: pcm16ToBase64(f), is_final: isFinal } }));
        expect(Array.from(responseAudioPcm(raw, scratch)!)).toEqual(Array.from(f));
      }
    }
  });

  it('leaves every other shape to the JSON path', () => {
    const audio = pcm16ToBase64(frame(4));
    const others = [
      JSON.stringify({ type: 'interruption', data: {} }),
      JSON.stringify({ type: 'response_text', data: { text: '"audio":"AAAA"' } }),
      JSON.stringify({ data: { audio }, type: 'response_audio' }),
      // Valid JSON the fast path does not read: an escaped slash, odd samples, a cut message.
      `{"type":"response_audio","data":{"audio":"${audio.slice(0, -4)}AA\\/A"}}`,
      `{"type":"response_audio","data":{"audio":"AQ=="}}`,
      `{"type":"response_audio","data":{"audio":"${audio}"`,
    ];
    for (const o of others) expect(responseAudioPcm(Buffer.from(o), scratch), o).toBeUndefined();
  });
});
