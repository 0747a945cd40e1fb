// Starts Portkey's gateway (installed by bench/run into bench/node_modules) bound to 127.0.0.1 only.
// Its server listens on every interface by default; this wrapper pins the host of every listen().
import net from 'node:net';
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if (typeof args[0] === 'number' || typeof args[0] === 'string') {
    if (typeof args[1] === 'function') args.splice(1, 0, '127.0.0.1');
    else if (args.length < 2 || args[1] === undefined || args[1] === null || args[1] === '0.0.0.0' || args[1] === '::') args[1] = '127.0.0.1';
  } else if (args[0] && typeof args[0] === 'object') {
    args[0] = { ...args[0], host: '127.0.0.1' };
  }
  return listen.apply(this, args);
};
await import('./node_modules/@portkey-ai/gateway/build/start-server.js');
