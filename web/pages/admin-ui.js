/**
 * Small pieces shared by the admin pages (agents, numbers, trunks, keys): loading a resource,
 * announcing errors, and the API's validation message mapped to the field it names. Everything
 * is rendered as text by Preact (no innerHTML anywhere), so names and prompts typed by users are
 * data, never markup.
 */
import { html, useCallback, useEffect, useState } from '../vendor/preact-htm.mjs';
import { api } from '../lib/api.js';

/** `{ data, error, reload }` of GET `path` (null path: nothing loaded). */
export function useResource(path) {
  const [state, setState] = useState({ data: null, error: '' });
  const [generation, setGeneration] = useState(0);
  const reload = useCallback(() => setGeneration((g) => g + 1), []);
  useEffect(() => {
    if (path === null) return undefined;
    let stale = false;
    api(path).then(
      (data) => !stale && setState({ data, error: '' }),
      (err) => !stale && setState((s) => ({ data: s.data, error: err.message })),
    );
    return () => {
      stale = true;
    };
  }, [path, generation]);
  return { ...state, reload };
}

/** An error announced to screen readers as it appears. */
export function Alert({ id, message }) {
  return message ? html`<p id=${id} role="alert" class="warn">${message}</p>` : null;
}

/** A success note, announced politely. */
export function Status({ message }) {
  return html`<p role="status" class="muted">${message}</p>`;
}

/**
 * The field a validation message names: "body.vad_settings.stop_secs must be <= 10" -> the
 * input named "vad_settings.stop_secs" (the forms name their inputs after the API's fields).
 */
export function fieldOfError(message) {
  const m = /^body\.([a-z_]+(?:\.[a-z_]+)?)/.exec(message ?? '');
  return m ? m[1] : '';
}

/**
 * A labelled input whose error (when the API named this field) is shown under it and tied to it
 * with aria-describedby. `as`: 'input' (default), 'textarea' or 'select' (children: options).
 */
export function Field({ label, name, error, as = 'input', children, hint, ...props }) {
  const id = `f-${name.replaceAll('.', '-')}`;
  const invalid = error && fieldOfError(error) === name;
  const described = [invalid ? `${id}-error` : '', hint ? `${id}-hint` : ''].filter(Boolean).join(' ') || undefined;
  const common = { id, name, 'aria-invalid': invalid ? 'true' : undefined, 'aria-describedby': described, ...props };
  const control =
    as === 'textarea'
      ? html`<textarea ...${common}></textarea>`
      : as === 'select'
        ? html`<select ...${common}>${children}</select>`
        : html`<input ...${common} />`;
  return html`<div class="field">
    <label for=${id}>${label}</label>
    ${control}
    ${hint ? html`<small id=${`${id}-hint`} class="muted">${hint}</small>` : null}
    ${invalid ? html`<small id=${`${id}-error`} class="warn">${error}</small>` : null}
  </div>`;
}

/** A button that asks once more before it acts (the console never opens a browser dialog). */
export function ConfirmButton({ label, fullLabel, confirmLabel, onConfirm, disabled }) {
  const [asking, setAsking] = useState(false);
  // fullLabel: what the button does to which row ("Delete Main PBX"), for screen readers and
  // voice control, where the visible label ("Delete") is short to fit the table.
  if (!asking) return html`<button type="button" class="secondary outline" aria-label=${fullLabel} disabled=${disabled} onClick=${() => setAsking(true)}>${label}</button>`;
  return html`<span role="group">
    <button type="button" class="contrast" onClick=${() => { setAsking(false); onConfirm(); }}>${confirmLabel}</button>
    <button type="button" class="secondary" onClick=${() => setAsking(false)}>Cancel</button>
  </span>`;
}

/** A local date and time, or a dash. */
export const when = (iso) => (iso ? new Date(iso).toLocaleString() : '–');
