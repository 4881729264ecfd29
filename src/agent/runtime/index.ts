/**
 * The agent runtime: one AgentRuntime per voice session, built from small stages (turn
 * detection, DTMF collection, the reply and tool loop, speech output, timers, the post-call analysis) that
 * pass typed events (events.ts). docs/agent-runtime.md describes them.
 */
export { AgentRuntime, REPROMPT_TEXT, type RuntimeDeps } from './agent-runtime.ts';
export type { ModelStream } from './reply-loop.ts';
