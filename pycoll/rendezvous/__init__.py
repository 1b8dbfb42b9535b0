"""How the ranks of a job find and trust each other, before any collective runs:

launch_env   rank, world size and rendezvous address from the launcher's environment
store        the key-value stores' public names, gathered from: tcp_store (TCPStore, rank 0's), store_server (its
             server), store_protocol (its wire format), file_store (FileStore, a shared directory), store_gather
             (every rank's value to all), generations (each init's own rendezvous in the store)
handshake    the opening of every connection: magic, version, mutual HMAC authentication
user_secret  the store's secret for a job on one host without PYCOLL_SECRET: a file only this user can read;
             secret_cleanup removes the stale ones of ports no longer used
listener     one non-blocking server loop for the store and the peer listeners (bounded, flood-proof)
"""
