/**
 * Shared JSON Schemas (TypeBox) of the API: the same objects validate requests, shape responses
 * and generate /v1/openapi.json.
 */
import { Type, type TSchema, type TProperties, type TObject } from '@sinclair/typebox';
import { UUID_PATTERN } from '../domain/ids.ts';

/** An object that rejects fields it does not name (DESIGN.md: unknown body fields are 400). */
export const Obj = <T extends TProperties>(props: T, opts: { description?: string; title?: string } = {}): TObject<T> =>
  Type.Object(props, { additionalProperties: false, ...opts });

export const Uuid = (description?: string) => Type.String({ pattern: UUID_PATTERN, description: description ?? 'uuid' });
export const NullableUuid = (description?: string) =>
  Type.Unsafe<string | null>({ type: ['string', 'null'], pattern: UUID_PATTERN, description });
export const NullableString = (opts: { maxLength?: number; pattern?: string; description?: string } = {}) =>
  Type.Unsafe<string | null>({ type: ['string', 'null'], ...opts });
export const DateTime = () => Type.String({ format: 'date-time' });

export const ErrorBody = Obj({ error: Type.String() }, { title: 'Error' });

/** Response schemas for the given error statuses, for the OpenAPI document. */
export function errorResponses(...statuses: number[]): Record<number, TSchema> {
  return Object.fromEntries(statuses.map((s) => [s, ErrorBody]));
}

export const IdParams = Obj({ id: Uuid('id of the resource') });

export const Variable = Obj({ key: Type.String({ maxLength: 256 }), value: Type.String({ maxLength: 65536 }) }, { title: 'Variable' });

export const Pagination = (maxLimit: number) =>
  Obj({
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: maxLimit, default: 100 })),
    offset: Type.Optional(Type.Integer({ minimum: 0, default: 0 })),
  });
