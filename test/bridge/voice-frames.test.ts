/**
 * The voice socket's audio as bytes (src/bridge/voice-frames.ts, used on the main thread and in
 * media workers): the input_audio message built as bytes and the response_audio samples read
 * from bytes must mean exactly what the JSON does, and anything of another shape must fall back
 * to the JSON path.
 */
import { randomInt } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
import WebSocket, { WebSocketServer } from 'ws';
import { inputAudioMessage, inputAudioSender, responseAudioPcm, serverFrameReader, type ServerMessage } from '../../src/bridge/voice-frames.ts';
import { pcm16ToBase64 } from '../../src/media/pcm.ts';
import { serializeServerEvent } from '../../src/session/protocol.ts';

const frame = (n: number) => Int16Array.from({ length: n }, () => randomInt(-32768, 32768));

describe('voice frames: input_audio as bytes', () => {
  it('is the JSON input_audio message of the frame', () => {
    for (const n of [480, 1, 2, 3, 0]) {
      const f = frame(n);
      const msg = inputAudioMessage(f);
      expect(JSON.parse(msg.toString('utf8'))).toEqual({ type: 'input_audio', data: { audio: pcm16ToBase64(f) } });
    }
  });
});

describe('voice frames: one input_audio buffer per call, rewritten every frame', () => {
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
      const send = inputAudioSender(ws);
      for (const f of frames) send(f);
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

describe('voice frames: response_audio from bytes', () => {
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

describe('voice frames: serverFrameReader', () => {
  function reader() {
    const got = { audio: [] as number[][], messages: [] as ServerMessage[], warnings: [] as string[] };
    const read = serverFrameReader({
      audio: (pcm) => got.audio.push(Array.from(pcm)),
      message: (m) => got.messages.push(m),
      warn: (w) => got.warnings.push(w),
    });
    return { got, read: (text: string, isBinary = false) => read(Buffer.from(text), isBinary) };
  }

  it('plays response_audio of either shape and passes every other message on', () => {
    const { got, read } = reader();
    const f = frame(6);
    read(serializeServerEvent({ type: 'response_audio', data: { turn_id: 't', audio: pcm16ToBase64(f), is_final: false } }));
    read(JSON.stringify({ data: { audio: pcm16ToBase64(f) }, type: 'response_audio' })); // the JSON path
    read(JSON.stringify({ type: 'interruption', data: {} }));
    expect(got.audio).toEqual([Array.from(f), Array.from(f)]);
    expect(got.messages).toEqual([{ type: 'interruption', data: {} }]);
    expect(got.warnings).toEqual([]);
  });

  it('warns about what it cannot read and drops empty audio, binary frames and non-objects', () => {
    const { got, read } = reader();
    read('not json');
    read('{"type":"response_audio","data":{"audio":"AQ=="}}'); // one byte: not PCM16
    read('{"type":"response_audio","data":{"audio":""}}');
    read('{"type":"response_audio","data":{"audio":7}}');
    read('null');
    read('"text"');
    read(JSON.stringify({ type: 'interruption' }), true);
    expect(got.warnings).toEqual(['voice server sent a frame that is not JSON: ignored', 'response_audio that is not PCM16 base64: dropped']);
    expect(got.audio).toEqual([]);
    expect(got.messages).toEqual([]);
  });
});
