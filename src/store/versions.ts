/**
 * Agent drafts and versions. The draft holds the conversation flow `{ nodes }`; a version is a
 * tagged snapshot of it; the active version is the one published last.
 * Callers check that the agent belongs to the organization before calling in here.
 */
import type { SqlClient } from './sql-client.ts';

export type FlowNode = Record<string, unknown> & { id: string; type: string };

export interface Draft {
  agent_id: string;
  nodes: FlowNode[];
  updated_at: string;
}

export interface AgentVersion {
  id: string;
  agent_id: string;
  created_at: string;
  /** null until published; the API shows it as null. */
  published_at: string | null;
  tag: string;
}

export interface VersionWithNodes extends AgentVersion {
  nodes: FlowNode[];
}

interface VersionRow extends AgentVersion {
  nodes: string;
}

const withNodes = (r: VersionRow): VersionWithNodes => ({ ...toVersion(r), nodes: JSON.parse(r.nodes) as FlowNode[] });
export const toVersion = (r: AgentVersion): AgentVersion => ({
  id: r.id,
  agent_id: r.agent_id,
  created_at: r.created_at,
  published_at: r.published_at,
  tag: r.tag,
});

export class VersionRepo {
  constructor(private readonly db: SqlClient) {}

  async getDraft(agentId: string): Promise<Draft | undefined> {
    const r = await this.db.get<{ agent_id: string; nodes: string; updated_at: string }>('SELECT agent_id, nodes, updated_at FROM agent_drafts WHERE agent_id = ?', [agentId]);
    return r && { agent_id: r.agent_id, nodes: JSON.parse(r.nodes) as FlowNode[], updated_at: r.updated_at };
  }

  async putDraft(agentId: string, nodes: FlowNode[], at: string): Promise<Draft> {
    await this.db.run(
      'INSERT INTO agent_drafts (agent_id, nodes, updated_at) VALUES (?, ?, ?) ON CONFLICT(agent_id) DO UPDATE SET nodes = excluded.nodes, updated_at = excluded.updated_at',
      [agentId, JSON.stringify(nodes), at],
    );
    return { agent_id: agentId, nodes, updated_at: at };
  }

  async get(agentId: string, id: string): Promise<VersionWithNodes | undefined> {
    const r = await this.db.get<VersionRow>('SELECT id, agent_id, tag, nodes, created_at, published_at FROM agent_versions WHERE id = ? AND agent_id = ?', [id, agentId]);
    return r && withNodes(r);
  }

  async list(agentId: string): Promise<AgentVersion[]> {
    return (await this.db.all<VersionRow>('SELECT id, agent_id, tag, nodes, created_at, published_at FROM agent_versions WHERE agent_id = ? ORDER BY created_at, id', [agentId])).map(toVersion);
  }

  async insert(v: VersionWithNodes): Promise<void> {
    await this.db.run('INSERT INTO agent_versions (id, agent_id, tag, nodes, created_at, published_at) VALUES (?, ?, ?, ?, ?, ?)', [
      v.id,
      v.agent_id,
      v.tag,
      JSON.stringify(v.nodes),
      v.created_at,
      v.published_at,
    ]);
  }

  /** Marks the version published; false when it already was (the caller answers 409). */
  async markPublished(id: string, at: string): Promise<boolean> {
    return (await this.db.run('UPDATE agent_versions SET published_at = ? WHERE id = ? AND published_at IS NULL', [at, id])).changes > 0;
  }
}
