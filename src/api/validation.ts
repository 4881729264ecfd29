/**
 * JSON Schema validation of requests. Bodies are validated strictly (no type coercion, no
 * silently removed fields: an unknown field is a 400 naming it); path and query strings are
 * coerced to numbers and booleans where the schema says so, since they arrive as text.
 */
import { Ajv, type ErrorObject } from 'ajv';
import addFormatsModule from 'ajv-formats';
import type { FastifyInstance, FastifySchema } from 'fastify';
import { UUID_PATTERN } from '../domain/ids.ts';
import { DIAL_STRING_PATTERN, E164_PATTERN } from '../domain/phone.ts';

// ajv-formats is CommonJS; under NodeNext its default export is the module object.
const addFormats = addFormatsModule as unknown as (ajv: Ajv) => Ajv;

function makeAjv(coerceTypes: boolean): Ajv {
  const ajv = new Ajv({ allErrors: false, coerceTypes, removeAdditional: false, useDefaults: false, strict: false });
  addFormats(ajv);
  return ajv;
}

const PATTERN_NAMES: Record<string, string> = {
  [UUID_PATTERN]: 'must be a uuid',
  [E164_PATTERN]: 'must be an E.164 number (+ and up to 15 digits)',
  [DIAL_STRING_PATTERN]: 'must be an E.164 number or a dial string of digits, * and #',
};

export function installValidation(app: FastifyInstance): void {
  const strict = makeAjv(false);
  const coercing = makeAjv(true);
  app.setValidatorCompiler(({ schema, httpPart }) => (httpPart === 'body' ? strict : coercing).compile(schema as object));
  app.setSchemaErrorFormatter((errors, dataVar) => {
    const err = new Error(formatValidationErrors(errors as ErrorObject[], dataVar));
    return err;
  });
}

/** One human-readable message that names the field: "body.voice_settings.speed must be <= 2". */
export function formatValidationErrors(errors: ErrorObject[], dataVar: string): string {
  const e = errors[0];
  if (!e) return `${dataVar} is invalid`;
  const path = [dataVar, ...e.instancePath.split('/').filter(Boolean)].join('.');
  const params = e.params as Record<string, unknown>;
  // A missing body (no bytes, whatever the content type says) lands here too.
  if (dataVar === 'body' && e.instancePath === '' && e.keyword === 'type') return 'body must be a JSON object (it is missing or of another type)';
  switch (e.keyword) {
    case 'additionalProperties':
      return `${path}.${String(params.additionalProperty)} is not a known field`;
    case 'required':
      return `${path}.${String(params.missingProperty)} is required`;
    case 'enum':
      return `${path} must be one of ${(params.allowedValues as unknown[]).map((v) => JSON.stringify(v)).join(', ')}`;
    case 'format':
      return `${path} must be a valid ${String(params.format)}`;
    case 'pattern':
      return `${path} ${PATTERN_NAMES[String(params.pattern)] ?? `must match ${String(params.pattern)}`}`;
    default:
      return `${path} ${e.message ?? 'is invalid'}`;
  }
}

export type { FastifySchema };
