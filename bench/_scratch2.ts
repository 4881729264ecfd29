import { createResampler, initResamplers } from '../src/media/resampler.ts';
import { tone } from '../test/media/signal-analysis.ts';
await initResamplers({ plain: true });
const pairs: [number, number][] = [[8000, 24000], [24000, 8000], [16000, 24000], [24000, 16000], [48000, 24000], [24000, 48000]];
for (const [i, o] of pairs) {
  const res: string[] = [];
  for (const [name, opts] of [['fir', { impl: 'fir' }], ['speex4', { impl: 'speex', quality: 4 }], ['speex3', { impl: 'speex', quality: 3 }], ['speex4plain', { impl: 'speex', quality: 4, variant: 'plain' }]] as const) {
    const r = createResampler(i, o, opts as any);
    const frame = tone(1000, i, 0.02, 10000);
    for (let k = 0; k < 3000; k++) r.process(frame);
    const samples: number[] = [];
    for (let rep = 0; rep < 15; rep++) {
      const t0 = performance.now();
      for (let k = 0; k < 1000; k++) r.process(frame);
      samples.push((performance.now() - t0));
    }
    samples.sort((a, b) => a - b);
    res.push(`${name} ${samples[7]!.toFixed(2)}us`);
    r.close();
  }
  console.log(i, '->', o, res.join('  '));
}
