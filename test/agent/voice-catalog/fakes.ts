/**
 * Fakes of the six voice vendors' voice-list APIs, as each vendor documents them, on a real HTTP
 * server on loopback: the vendor's path and method, its auth header (a wrong or missing key gets
 * the vendor's 401), its pagination and its response shape. Every answer comes after a delay
 * (default 80 ms, about a vendor's list call from a nearby region).
 *
 * - ElevenLabs `GET /v1/voices`, `xi-api-key`: `{ voices: [{ voice_id, name, description,
 *   preview_url, labels, verified_languages: [{ language }] }] }`.
 * - Cartesia `GET /voices`, `X-API-Key` + `Cartesia-Version`: `{ data, has_more }`, `limit`
 *   and `starting_after`.
 * - Hume `GET /v0/tts/voices?provider=HUME_AI|CUSTOM_VOICE`, `X-Hume-Api-Key`: `{ page_number, page_size,
 *   total_pages, voices_page: [{ id, name, provider }] }`, pages from 0.
 * - MiniMax `POST /v1/get_voice`, `Authorization: Bearer`, `{ voice_type }`: `{ system_voice,
 *   voice_cloning, voice_generation, base_resp: { status_code, status_msg } }`.
 * - Fish `GET /model`, `Authorization: Bearer`: `{ total, items: [{ _id, type, title,
 *   description, languages, samples: [{ audio }] }] }`, pages from 1.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export type Vendor = 'elevenlabs' | 'cartesia' | 'hume' | 'minimax' | 'fish';

/** A voice as the test states it; each fake renders it in its vendor's own shape. */
export interface FakeVoice {
  id: string;
  name: string;
  description?: string;
  language?: string;
  preview?: string;
}

export interface VoiceVendorFake {
  vendor: Vendor;
  url: string;
  key: string;
  voices: FakeVoice[];
  /** Hume only: the account's saved voices (`provider=CUSTOM_VOICE`); `voices` is the Voice Library. */
  customVoices: FakeVoice[];
  /** undefined: up; a number: every request answered with that HTTP status; 'close': sockets destroyed. */
  down: number | 'close' | undefined;
  /** Most voices per page the fake gives, whatever is asked (to exercise paging). */
  maxPage: number;
  delayMs: number;
  /** Every request: method, path with query, and the auth headers it carried. */
  requests: Array<{ method: string; url: string; headers: IncomingMessage['headers'] }>;
  close(): Promise<void>;
}

const send = (res: ServerResponse, status: number, body: unknown) => {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
};

function authorized(vendor: Vendor, req: IncomingMessage, key: string): boolean {
  const h = req.headers;
  switch (vendor) {
    case 'elevenlabs':
      return h['xi-api-key'] === key;
    case 'cartesia':
      return h['x-api-key'] === key && typeof h['cartesia-version'] === 'string' && /^\d{4}-\d{2}-\d{2}$/.test(h['cartesia-version']);
    case 'hume':
      return h['x-hume-api-key'] === key;
    case 'minimax':
    case 'fish':
      return h.authorization === `Bearer ${key}`;
  }
}

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

function answer(f: VoiceVendorFake, req: IncomingMessage, res: ServerResponse, body: string): void {
  const url = new URL(req.url ?? '/', 'http://x');
  const q = url.searchParams;
  const v = f.voices;
  switch (f.vendor) {
    case 'elevenlabs':
      if (req.method !== 'GET' || url.pathname !== '/v1/voices') return send(res, 404, { detail: { status: 'not_found' } });
      return send(res, 200, {
        voices: v.map((x) => ({
          voice_id: x.id,
          name: x.name,
          category: 'premade',
          description: x.description ?? null,
          preview_url: x.preview ?? null,
          labels: { accent: 'american', gender: 'female', ...(x.language ? { language: x.language } : {}) },
          verified_languages: x.language ? [{ language: x.language, model_id: 'eleven_multilingual_v2', accent: 'standard' }] : [],
          settings: null,
        })),
      });
    case 'cartesia': {
      if (req.method !== 'GET' || url.pathname !== '/voices') return send(res, 404, { error: 'not found' });
      const limit = Math.min(Number(q.get('limit') ?? 10), f.maxPage);
      const after = q.get('starting_after');
      const start = after === null ? 0 : v.findIndex((x) => x.id === after) + 1;
      const page = v.slice(start, start + limit);
      return send(res, 200, {
        data: page.map((x) => ({ id: x.id, name: x.name, description: x.description ?? '', language: x.language ?? 'en', is_public: true, is_owner: false, created_at: '2025-01-01T00:00:00Z', ...(x.preview ? { preview_file_url: x.preview } : {}) })),
        has_more: start + limit < v.length,
      });
    }
    case 'hume': {
      if (req.method !== 'GET' || url.pathname !== '/v0/tts/voices') return send(res, 404, { message: 'not found' });
      if (q.get('provider') !== 'HUME_AI' && q.get('provider') !== 'CUSTOM_VOICE') return send(res, 400, { message: 'provider is required' });
      const size = Math.min(Number(q.get('page_size') ?? 10), f.maxPage, 100);
      const n = Number(q.get('page_number') ?? 0);
      const list = q.get('provider') === 'HUME_AI' ? v : f.customVoices;
      return send(res, 200, {
        page_number: n,
        page_size: size,
        total_pages: Math.ceil(list.length / size),
        voices_page: list.slice(n * size, n * size + size).map((x) => ({ id: x.id, name: x.name, provider: q.get('provider'), compatible_octave_models: ['1', '2'] })),
      });
    }
    case 'minimax': {
      if (req.method !== 'POST' || url.pathname !== '/v1/get_voice') return send(res, 404, { base_resp: { status_code: 404, status_msg: 'not found' } });
      const asked = (JSON.parse(body || '{}') as { voice_type?: string }).voice_type;
      if (asked !== 'all' && asked !== 'system') return send(res, 200, { base_resp: { status_code: 2013, status_msg: 'invalid params, voice_type' } });
      // The first half are system voices, the rest cloned: both groups are the account's voices.
      const half = Math.ceil(v.length / 2);
      return send(res, 200, {
        system_voice: v.slice(0, half).map((x) => ({ voice_id: x.id, voice_name: x.name, description: x.description ? [x.description] : [], created_time: '1970-01-01' })),
        voice_cloning: asked === 'all' ? v.slice(half).map((x) => ({ voice_id: x.id, description: x.description ? [x.description] : [], created_time: '2025-01-01' })) : [],
        voice_generation: [],
        base_resp: { status_code: 0, status_msg: 'success' },
      });
    }
    case 'fish': {
      if (req.method !== 'GET' || url.pathname !== '/model') return send(res, 404, { status: 404, message: 'Not Found' });
      const size = Math.min(Number(q.get('page_size') ?? 10), f.maxPage);
      const n = Number(q.get('page_number') ?? 1);
      const mine = q.get('self') === 'true' ? v : [];
      return send(res, 200, {
        total: mine.length,
        items: mine.slice((n - 1) * size, n * size).map((x) => ({
          _id: x.id,
          type: 'tts',
          title: x.name,
          description: x.description ?? '',
          cover_image: '',
          train_mode: 'fast',
          state: 'trained',
          tags: [],
          samples: x.preview ? [{ title: 'sample', text: 'hello', task_id: 't', audio: x.preview }] : [],
          languages: x.language ? [x.language] : [],
          visibility: 'private',
        })),
      });
    }
  }
}

function unauthorized(vendor: Vendor, res: ServerResponse): void {
  if (vendor === 'minimax') return send(res, 200, { base_resp: { status_code: 1004, status_msg: 'login fail: Please carry the API secret key in the Authorization field' } });
  if (vendor === 'elevenlabs') return send(res, 401, { detail: { status: 'invalid_api_key', message: 'Invalid API key' } });
  return send(res, 401, { status: 401, message: 'Unauthorized' });
}

export async function startVoiceVendorFake(vendor: Vendor, voices: FakeVoice[], options: { key?: string; delayMs?: number; maxPage?: number } = {}): Promise<VoiceVendorFake> {
  const sockets = new Set<import('node:net').Socket>();
  const fake: VoiceVendorFake = {
    vendor,
    url: '',
    key: options.key ?? `key-${vendor}-0123456789`,
    voices,
    customVoices: [],
    down: undefined,
    maxPage: options.maxPage ?? 100,
    delayMs: options.delayMs ?? 80,
    requests: [],
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
  const server: Server = createServer((req, res) => {
    void (async () => {
      const body = await readBody(req);
      fake.requests.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers });
      await new Promise((r) => setTimeout(r, fake.delayMs));
      if (fake.down === 'close') return req.socket.destroy();
      if (typeof fake.down === 'number') return send(res, fake.down, { error: 'service unavailable' });
      if (!authorized(vendor, req, fake.key)) return unauthorized(vendor, res);
      answer(fake, req, res, body);
    })();
  });
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  fake.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return fake;
}
