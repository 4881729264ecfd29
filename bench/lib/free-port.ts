import { createServer, type AddressInfo } from 'node:net';

/** A TCP port free on `host` now (the OS picks it; the daemon started next binds it). */
export function freePort(host = '127.0.0.1'): Promise<number> {
  return new Promise<number>((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, host, () => {
      const p = (srv.address() as AddressInfo).port;
      srv.close(() => resolve(p));
    });
  });
}
