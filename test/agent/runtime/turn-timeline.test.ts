/**
 * The turn timeline recorder (src/agent/runtime/turn-timeline.ts) fed the stages' events on
 * virtual time: which turn each mark lands in, when a turn is complete (heard, cut, the session's
 * end; a phone turn once the bridge reported its first RTP packet, or after the grace), and that
 * an observer that throws does not reach the conversation.
 */
import { describe, expect, it } from 'vitest';
import type { TurnTimeline } from '../../../src/domain/turn-latency.ts';
import type { AgentTurn } from '../../../src/agent/runtime/events.ts';
import { AUDIO_OUT_REPORT_GRACE_MS, TurnTimelineRecorder } from '../../../src/agent/runtime/turn-timeline.ts';
import { VirtualTime } from '../../helpers/virtual-time.ts';
import { testLogger } from './harness.ts';

function setup(audioOutReported = false) {
  const time = new VirtualTime();
  const done: TurnTimeline[] = [];
  const { log, lines } = testLogger();
  const recorder = new TurnTimelineRecorder({
    callId: 'call-1',
    observers: [{ turnComplete: () => { throw new Error('observer broke'); } }, { turnComplete: (callId, t) => done.push({ ...t, turnId: `${callId}/${t.turnId}` }) }],
    now: () => time.now(),
    timers: time,
    audioOutReported,
    log,
  });
  const turn = (turnId: string, kind: AgentTurn['kind']): AgentTurn => ({ turnId, kind, text: '', signal: new AbortController().signal });
  return { time, done, lines, recorder, turn };
}

describe('TurnTimelineRecorder', () => {
  it('a reply takes the caller marks of the user turn it answers; each mark once; complete when heard', () => {
    const { time, done, lines, recorder, turn } = setup();
    const first = turn('t0', 'first');
    recorder.speech({ type: 'turn_started', turn: first });
    recorder.speech({ type: 'mark', turnId: 't0', mark: 'tts_first_sentence' });
    time.advance(150);
    recorder.speech({ type: 'mark', turnId: 't0', mark: 'tts_first_audio' });
    recorder.speech({ type: 'audio', turnId: 't0', audio: '', isFinal: false });
    time.advance(40);
    recorder.speech({ type: 'audio', turnId: 't0', audio: '', isFinal: true });
    recorder.speech({ type: 'heard', turn: first });
    expect(done).toEqual([{ index: 0, turnId: 'call-1/t0', kind: 'first', marks: { tts_first_sentence: 1000, tts_first_audio: 1150, audio_out_first: 1150 } }]);
    // The throwing observer was logged, and the next one told all the same.
    expect(lines.some((l) => l.msg === 'a turn timeline observer failed')).toBe(true);

    time.advanceTo(2000);
    recorder.caller({ type: 'speech_started', emulated: false });
    recorder.caller({ type: 'speech_stopped' });
    time.advance(300);
    recorder.caller({ type: 'transcript', text: 'hi', turnId: 'u1', isFinal: true });
    recorder.caller({ type: 'user_turn', text: 'hi', turnId: 'u1' });
    time.advance(1);
    const reply = turn('t1', 'reply');
    recorder.speech({ type: 'turn_started', turn: reply });
    recorder.reply({ type: 'mark', turn: reply, mark: 'llm_request' });
    time.advance(200);
    recorder.reply({ type: 'mark', turn: reply, mark: 'llm_first_token' });
    recorder.reply({ type: 'mark', turn: reply, mark: 'llm_first_token' });
    recorder.speech({ type: 'heard', turn: reply });
    expect(done[1]!.marks).toEqual({ speech_end: 2000, transcript_final: 2300, llm_request: 2301, llm_first_token: 2501 });
    // A reprompt takes no caller marks.
    recorder.speech({ type: 'turn_started', turn: turn('t2', 'reprompt') });
    recorder.close();
    expect(done.map((d) => [d.index, d.kind, Object.keys(d.marks).length])).toEqual([[0, 'first', 3], [1, 'reply', 4], [2, 'reprompt', 0]]);
  });

  it('a user turn with nothing understood leaves no marks for the next reply; a cut turn has its barge-in and is complete at once', () => {
    const { time, done, recorder, turn } = setup();
    recorder.caller({ type: 'speech_stopped' });
    recorder.caller({ type: 'user_turn', text: '', turnId: 'u1' });
    const reply = turn('t0', 'reply');
    recorder.speech({ type: 'turn_started', turn: reply });
    time.advance(700);
    recorder.speech({ type: 'interrupted', turn: reply, heard: '' });
    expect(done).toEqual([{ index: 0, turnId: 'call-1/t0', kind: 'reply', marks: {}, bargeInAt: 1700 }]);
  });

  it('a phone call: audio_out_first is the bridge\'s report, not the response_audio; a turn over waits for it, at most the grace', () => {
    const { time, done, recorder, turn } = setup(true);
    const a = turn('a', 'first');
    recorder.speech({ type: 'turn_started', turn: a });
    // A report before any audio of the turn went to the client belongs to no turn.
    recorder.audioOut(999);
    recorder.speech({ type: 'audio', turnId: 'a', audio: '', isFinal: true });
    time.advance(10);
    recorder.speech({ type: 'heard', turn: a });
    expect(done).toEqual([]);
    recorder.audioOut(1030.5);
    expect(done.map((d) => d.marks)).toEqual([{ audio_out_first: 1030.5 }]);

    const b = turn('b', 'reply');
    recorder.speech({ type: 'turn_started', turn: b });
    recorder.speech({ type: 'audio', turnId: 'b', audio: '', isFinal: true });
    recorder.speech({ type: 'heard', turn: b });
    time.advance(AUDIO_OUT_REPORT_GRACE_MS - 1);
    expect(done).toHaveLength(1);
    time.advance(1);
    expect(done[1]!.marks).toEqual({});
    // A late report finds no turn.
    recorder.audioOut(5000);
    expect(done).toHaveLength(2);
  });
});
