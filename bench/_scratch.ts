import { createResampler, initResamplers } from '../src/media/resampler.ts';
import { toneThrough } from '../test/media/signal-analysis.ts';
await initResamplers();
for (const impl of ['fir', 'speex'] as const) for (const q of impl === 'speex' ? [3, 4, 5] : [0]) {
  const mk = (i: number, o: number) => () => createResampler(i, o, { impl, quality: q });
  const gains: number[] = []; let worstImg = -999;
  for (const f of [300, 500, 1000, 2000, 3000, 3400]) {
    const r = toneThrough(mk(8000, 24000), f, [8000 - f, 8000 + f]);
    gains.push(r.gainDb); worstImg = Math.max(worstImg, ...r.probesDb.map((p) => p - r.gainDb));
  }
  const d1 = toneThrough(mk(24000, 8000), 1000).gainDb;
  const d5 = toneThrough(mk(24000, 8000), 5000).gainDb;
  const d6 = toneThrough(mk(24000, 8000), 6000).gainDb;
  const d34 = toneThrough(mk(24000, 8000), 3400).gainDb;
  const r = mk(8000,24000)(); const r2 = mk(24000,8000)();
  console.log(impl, q, 'up gains', gains.map((g) => g.toFixed(3)).join(' '), 'worst image', worstImg.toFixed(1), '| down 1k', d1.toFixed(3), '3.4k', d34.toFixed(3), '5k', d5.toFixed(1), '6k', d6.toFixed(1), 'delay', r.delaySamples, r2.delaySamples);
}
