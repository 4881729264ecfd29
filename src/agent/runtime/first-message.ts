/**
 * How a session opens: the agent's first message (the dial's own, else the agent's, with the
 * session's variables filled in), spoken in a turn the caller can cut only after
 * first_message_interruption_time; or, when there is none or an outbound call skips it, the
 * silence timer starts at once. Apart from the runtime so that the opening can be read alone.
 */
import type { SessionContext } from '../../session/runtime-contract.ts';
import { substituteVariables } from '../template.ts';
import type { SessionStages } from './stages.ts';

export function openConversation(ctx: SessionContext, stages: SessionStages): void {
  const a = ctx.agent;
  const playFirst = ctx.direction !== 'outbound' || a.enable_first_message_outbound;
  const first = substituteVariables(ctx.firstMessage ?? a.first_message, ctx.variables).trim();
  if (!playFirst || first === '') {
    stages.timeouts.armSilence();
    return;
  }
  const turn = stages.speech.open('first', { interruptibleForMs: a.first_message_interruption_time * 1000 });
  stages.speech.say(turn, first);
  stages.speech.finish(turn);
  turn.messageIndex = stages.replies.addAgent(first);
}
