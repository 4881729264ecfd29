# syntax=docker/dockerfile:1
# Node 24, the newest LTS line (package.json's engines; CI runs the suite on it, scripts/ci-lts-node.sh).
# There the store's SQLite driver is better-sqlite3 13, the optional dependency better-sqlite3-napi
# (docs/decisions.md, "Supported Node lines"): the image keeps optional dependencies.
# Build stage: compile TypeScript and native modules (@discordjs/opus, better-sqlite3 12) with the
# full toolchain.
FROM node:24-bookworm AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
RUN npm run build && npm prune --omit=dev

# Runtime stage: compiled JavaScript and production dependencies only, as a non-root user.
FROM node:24-bookworm-slim
# MALLOC_ARENA_MAX=2: glibc gives every busy thread its own malloc arena and keeps each arena's
# high-water mark; with two the media threads' memory stays flat over hours (docs/media-workers.md).
ENV NODE_ENV=production \
    MALLOC_ARENA_MAX=2 \
    CALLBRIDGE_DATA_DIR=/data \
    CALLBRIDGE_HTTP_HOST=0.0.0.0 \
    CALLBRIDGE_HTTP_PORT=8080
WORKDIR /app
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY package.json ./
COPY bin ./bin
COPY config ./config
# The operator console's front end (served at /console; its libraries come from node_modules).
COPY web ./web
RUN mkdir -p /data && chown node:node /data
USER node
VOLUME ["/data"]
# REST API and voice WebSocket; SIP over UDP and TCP; RTP range (see CALLBRIDGE_RTP_PORT_*).
EXPOSE 8080 5060/udp 5060/tcp 20000-30000/udp
HEALTHCHECK --interval=15s --timeout=3s CMD node -e "fetch('http://127.0.0.1:'+(process.env.CALLBRIDGE_HTTP_PORT||8080)+'/readyz').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"
STOPSIGNAL SIGTERM
# --single-threaded-gc: each media thread collects its own garbage instead of waiting for V8's
# helper threads, which compete with it for the CPUs (docs/media-workers.md).
CMD ["node", "--single-threaded-gc", "bin/callbridge.js", "start"]
