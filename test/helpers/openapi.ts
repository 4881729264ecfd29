/**
 * The hosted service's own OpenAPI document (`../shared/spec/service-openapi.json`, OpenAPI
 * 3.0.3) as a test oracle: its operations, ajv validators of its response (and request) schemas,
 * and a client that sends requests the way the service's official SDK does.
 *
 * OpenAPI 3.0 schemas are not JSON Schema: `nullable: true` stands for a `null` type, `$ref`s
 * point into `#/components/schemas`, and formats such as `int64` and `binary` are unknown to
 * ajv. toJsonSchema() translates those; everything else is kept as written, so the document's
 * own constraints (required fields, enums, types) are what the daemon is held to.
 */
import { existsSync, readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv';
import addFormatsModule from 'ajv-formats';

// ajv-formats is CommonJS; under NodeNext its default export is the module object.
const addFormats = addFormatsModule as unknown as (ajv: Ajv) => Ajv;

const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
/** CI copies /work/shared beside the clone as `../shared`; locally it is the same layout. */
export const SERVICE_OPENAPI_PATH = resolve(REPO_ROOT, '../shared/spec/service-openapi.json');

export type Schema = { [keyword: string]: unknown };

export interface MediaType {
  schema?: Schema;
}
export interface OpenApiResponse {
  description?: string;
  content?: Record<string, MediaType>;
}
export interface OpenApiOperation {
  operationId: string;
  /** Upper case: GET, POST, ... */
  method: string;
  /** The document's path template, e.g. /v1/agents/{id}. */
  path: string;
  responses: Record<string, OpenApiResponse>;
  requestBody?: { required?: boolean; content?: Record<string, MediaType> };
  parameters?: Array<{ name: string; in: string; required?: boolean; schema?: Schema }>;
}

interface OpenApiDocument {
  openapi: string;
  info: { version: string };
  paths: Record<string, Record<string, unknown>>;
  components: { schemas: Record<string, Schema> };
}

const METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'];

/**
 * Reads the document. A missing file is an error, never a skip: the conformance test is the
 * proof that the service's own clients work unmodified, and a silently skipped proof proves nothing.
 */
export function loadServiceDocument(path = SERVICE_OPENAPI_PATH): OpenApiDocument {
  if (!existsSync(path)) {
    throw new Error(`the service's OpenAPI document is missing at ${path}: copy /work/shared beside the clone as ../shared (CI does)`);
  }
  const doc = JSON.parse(readFileSync(path, 'utf8')) as OpenApiDocument;
  if (!/^3\.0\./.test(doc.openapi)) throw new Error(`${path}: expected OpenAPI 3.0.x, found ${doc.openapi}`);
  return doc;
}

/** Every operation of the document, in document order. */
export function operationsOf(doc: OpenApiDocument): OpenApiOperation[] {
  const ops: OpenApiOperation[] = [];
  for (const [path, item] of Object.entries(doc.paths)) {
    for (const [method, raw] of Object.entries(item)) {
      if (!METHODS.includes(method)) continue;
      const op = raw as Omit<OpenApiOperation, 'method' | 'path'>;
      if (!op.operationId) throw new Error(`${method.toUpperCase()} ${path} has no operationId`);
      ops.push({ ...op, method: method.toUpperCase(), path });
    }
  }
  return ops;
}

// Keywords whose value is a map of schemas, a list of schemas, or one schema. Walking only these
// keeps property *names* (a property called `type`, say) from being read as keywords.
const SCHEMA_MAPS = ['properties', 'patternProperties', '$defs', 'definitions', 'dependentSchemas'];
const SCHEMA_LISTS = ['allOf', 'anyOf', 'oneOf', 'prefixItems'];
const SCHEMA_ONE = ['items', 'additionalProperties', 'not', 'contains', 'propertyNames', 'if', 'then', 'else', 'additionalItems'];
/** OpenAPI-only keywords that ajv's strict mode would refuse (nullable is translated instead). */
const OPENAPI_ONLY = ['nullable', 'example', 'xml', 'externalDocs', 'discriminator'];

export interface ConvertOptions {
  /** Base URI the converted `#/components/schemas/X` refs point into (`<base>#/$defs/X`). */
  refBase: string;
  /**
   * Response schemas: drop `additionalProperties: false`, since fields beyond the document are
   * an allowed deviation (docs/decisions.md). Request schemas keep it.
   */
  allowExtraFields: boolean;
}

/** An OpenAPI 3.0 schema as JSON Schema (draft-07 flavoured, as ajv's default). */
export function toJsonSchema(node: unknown, opts: ConvertOptions): unknown {
  if (Array.isArray(node)) return node.map((n) => toJsonSchema(n, opts));
  if (typeof node !== 'object' || node === null) return node; // true / false schemas
  const src = node as Schema;
  const out: Schema = {};
  for (const [k, v] of Object.entries(src)) {
    if (OPENAPI_ONLY.includes(k)) continue;
    if (k === '$ref') out.$ref = rewriteRef(String(v), opts.refBase);
    else if (SCHEMA_MAPS.includes(k)) out[k] = Object.fromEntries(Object.entries(v as Schema).map(([name, s]) => [name, toJsonSchema(s, opts)]));
    else if (SCHEMA_LISTS.includes(k)) out[k] = (v as unknown[]).map((s) => toJsonSchema(s, opts));
    else if (SCHEMA_ONE.includes(k)) out[k] = toJsonSchema(v, opts);
    else out[k] = v;
  }
  if (opts.allowExtraFields && out.additionalProperties === false) delete out.additionalProperties;
  return src.nullable === true ? nullable(out) : out;
}

function rewriteRef(ref: string, base: string): string {
  const m = /^#\/components\/schemas\/(.+)$/.exec(ref);
  if (!m) throw new Error(`unsupported $ref ${ref} (only #/components/schemas/... is used by the document)`);
  return `${base}#/$defs/${m[1]}`;
}

/**
 * `nullable: true` -> null is also valid. A `$ref` (OpenAPI 3.0 ignores its siblings, but the
 * document writes `$ref` + `nullable` on input fields it means to be nullable) or a typeless
 * schema becomes `anyOf [schema, null]`; a typed one gets 'null' added to type and enum.
 */
function nullable(s: Schema): Schema {
  if (typeof s.$ref === 'string' || s.type === undefined) {
    const { description, ...rest } = s;
    return { ...(description === undefined ? {} : { description }), anyOf: [rest, { type: 'null' }] };
  }
  const types = Array.isArray(s.type) ? (s.type as string[]) : [s.type as string];
  const out: Schema = { ...s, type: [...new Set([...types, 'null'])] };
  if (Array.isArray(s.enum) && !s.enum.includes(null)) out.enum = [...s.enum, null];
  return out;
}

function newAjv(): Ajv {
  // strict: a keyword the converter failed to translate is an error, not silently ignored.
  const ajv = new Ajv({ allErrors: true, strict: true, allowUnionTypes: true });
  addFormats(ajv);
  // OpenAPI's own formats: numeric widths (int64 is any integer here) and binary bodies.
  ajv.addFormat('int32', { type: 'number', validate: (n: number) => Number.isInteger(n) && n >= -(2 ** 31) && n < 2 ** 31 });
  ajv.addFormat('int64', { type: 'number', validate: (n: number) => Number.isInteger(n) });
  ajv.addFormat('float', { type: 'number', validate: () => true });
  ajv.addFormat('double', { type: 'number', validate: () => true });
  ajv.addFormat('binary', true);
  ajv.addFormat('byte', true);
  return ajv;
}

export interface ContractOptions {
  /** Changes applied to the converted component schemas used for responses only. */
  patchResponseSchemas?: (defs: Record<string, Schema>) => void;
}

/** Validators for one document. Messages name the JSON pointer of each failure. */
export class ServiceContract {
  readonly operations: OpenApiOperation[];
  readonly version: string;
  readonly #responseAjv = newAjv();
  readonly #requestAjv = newAjv();
  readonly #cache = new Map<string, ValidateFunction>();

  constructor(doc: OpenApiDocument, opts: ContractOptions = {}) {
    this.operations = operationsOf(doc);
    this.version = doc.info.version;
    const defs = (o: ConvertOptions) => Object.fromEntries(Object.entries(doc.components.schemas).map(([name, s]) => [name, toJsonSchema(s, o) as Schema]));
    const responseDefs = defs({ refBase: 'response', allowExtraFields: true });
    opts.patchResponseSchemas?.(responseDefs);
    this.#responseAjv.addSchema({ $id: 'response', $defs: responseDefs });
    this.#requestAjv.addSchema({ $id: 'request', $defs: defs({ refBase: 'request', allowExtraFields: false }) });
  }

  byId(operationId: string): OpenApiOperation {
    const op = this.operations.find((o) => o.operationId === operationId);
    if (!op) throw new Error(`the document has no operation ${operationId}`);
    return op;
  }

  /**
   * The operation a concrete request path belongs to. Templates with more literal segments win
   * (/v1/sip-trunks/assignments/{assignmentId} over /v1/sip-trunks/{id}/...).
   */
  operationFor(method: string, concretePath: string): OpenApiOperation | undefined {
    const segs = concretePath.split('?')[0]!.split('/');
    let best: { op: OpenApiOperation; literals: number } | undefined;
    for (const op of this.operations) {
      if (op.method !== method.toUpperCase()) continue;
      const t = op.path.split('/');
      if (t.length !== segs.length) continue;
      let literals = 0;
      const ok = t.every((seg, i) => {
        if (/^\{[^}]+\}$/.test(seg)) return segs[i] !== '';
        literals++;
        return seg === segs[i];
      });
      if (ok && (!best || literals > best.literals)) best = { op, literals };
    }
    return best?.op;
  }

  /** The statuses the document gives the operation, as numbers. */
  statuses(op: OpenApiOperation): number[] {
    return Object.keys(op.responses).map(Number);
  }

  /** The media types the document gives a status of the operation (none: no body described). */
  mediaTypes(op: OpenApiOperation, status: number): string[] {
    return Object.keys(op.responses[String(status)]?.content ?? {});
  }

  /** ajv errors of a JSON response body against the document's schema for that status ([] = valid or no schema). */
  validateResponse(op: OpenApiOperation, status: number, body: unknown): string[] {
    const schema = op.responses[String(status)]?.content?.['application/json']?.schema;
    if (!schema) return [];
    return this.#run(this.#responseAjv, `res ${op.operationId} ${status}`, schema, 'response', true, body);
  }

  /** ajv errors of a request body against the document's request schema ([] = valid). */
  validateRequest(op: OpenApiOperation, body: unknown): string[] {
    const schema = op.requestBody?.content?.['application/json']?.schema;
    if (!schema) return body === undefined ? [] : [`${op.operationId} documents no request body`];
    return this.#run(this.#requestAjv, `req ${op.operationId}`, schema, 'request', false, body);
  }

  /** ajv errors of a value against a component schema (response flavour), e.g. a WebSocket message. */
  validateComponent(name: string, value: unknown): string[] {
    return this.#run(this.#responseAjv, `component ${name}`, { $ref: `#/components/schemas/${name}` }, 'response', true, value);
  }

  #run(ajv: Ajv, key: string, schema: Schema, refBase: string, allowExtraFields: boolean, value: unknown): string[] {
    let validate = this.#cache.get(key);
    if (!validate) {
      validate = ajv.compile(toJsonSchema(schema, { refBase, allowExtraFields }) as Schema);
      this.#cache.set(key, validate);
    }
    return validate(value) ? [] : formatErrors(validate.errors ?? []);
  }
}

/** "/voice_settings/provider must be equal to one of the allowed values (elevenlabs, ...)". */
export function formatErrors(errors: ErrorObject[]): string[] {
  return errors.map((e) => {
    const where = e.instancePath === '' ? '(root)' : e.instancePath;
    const allowed = (e.params as { allowedValues?: unknown[] }).allowedValues;
    return `${where} ${e.message ?? e.keyword}${allowed ? ` (${allowed.map((v) => JSON.stringify(v)).join(', ')})` : ''}`;
  });
}

export interface SdkResponse {
  status: number;
  headers: Headers;
  contentType: string;
  /** The raw bytes (a WAV for the recording). */
  bytes: Buffer;
  text: string;
  /** Parsed JSON when the response says it is JSON, else undefined. */
  body: any;
}

export interface SdkRequestOptions {
  query?: Record<string, string | undefined>;
  body?: unknown;
  /** Override the API key (a wrong one for 401s). */
  key?: string;
}

/**
 * One request the way the official SDK sends it (spec/README.md): the URL built with
 * `new URL(path, baseUrl)`, `Authorization: Bearer <key>` and `Content-Type: application/json`
 * on every request, and no body at all (not even "") when there is nothing to send.
 */
export async function sdkRequest(baseUrl: string, key: string, method: string, path: string, opts: SdkRequestOptions = {}): Promise<SdkResponse> {
  const url = new URL(path, baseUrl);
  for (const [k, v] of Object.entries(opts.query ?? {})) if (v !== undefined) url.searchParams.set(k, v);
  const init: RequestInit = {
    method,
    headers: { authorization: `Bearer ${opts.key ?? key}`, 'content-type': 'application/json' },
  };
  if (opts.body !== undefined) init.body = typeof opts.body === 'string' ? opts.body : JSON.stringify(opts.body);
  const res = await fetch(url, init);
  const bytes = Buffer.from(await res.arrayBuffer());
  const contentType = res.headers.get('content-type') ?? '';
  const text = contentType.startsWith('audio/') ? `<${bytes.length} bytes of ${contentType}>` : bytes.toString('utf8');
  let body: unknown;
  if (/\bjson\b/.test(contentType) && bytes.length > 0) {
    try {
      body = JSON.parse(bytes.toString('utf8'));
    } catch {
      body = undefined; // reported by the caller: a JSON content type with a body that is not JSON
    }
  }
  return { status: res.status, headers: res.headers, contentType, bytes, text, body };
}
