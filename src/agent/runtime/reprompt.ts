/**
 * The re-prompt: what the agent says when the caller has been silent for a while (the silence
 * timer's strike before its last, timers.ts). A turn of its own, kept in the model's history so
 * the model knows it was asked.
 */
import type { SessionStages } from './stages.ts';

/** Said after silence_timeout_secs of silence, before the last strike. */
export const REPROMPT_TEXT = 'Are you still there?';

export function speakReprompt(stages: Pick<SessionStages, 'speech' | 'replies'>): void {
  const turn = stages.speech.open('reprompt');
  stages.speech.say(turn, REPROMPT_TEXT);
  stages.speech.finish(turn);
  stages.replies.addAgent(REPROMPT_TEXT);
}
