/**
 * Prometheus metrics of the agent runtime (on the daemon's registry, served at /metrics).
 */
import { Histogram, type Registry } from 'prom-client';

export interface AgentMetrics {
  /** A TTS request's first audio chunk came `seconds` after the request, from voice slot `provider` of adapter `type`. */
  ttsFirstByte(provider: string, type: string, seconds: number): void;
}

export function createAgentMetrics(registry: Registry): AgentMetrics {
  const firstByte = new Histogram({
    name: 'callbridge_tts_first_byte_seconds',
    help: 'Time from a TTS request (one sentence or clause) to its first audio chunk, by voice provider slot and adapter type, s. Requests that end before any audio are not counted.',
    labelNames: ['provider', 'type'] as const,
    buckets: [0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 5],
    registers: [registry],
  });
  return {
    ttsFirstByte(provider, type, seconds) {
      firstByte.observe({ provider, type }, seconds);
    },
  };
}
