"""How the ranks of a job find and trust each other, before any collective runs:

launch_env   rank, world size and rendezvous address from the launcher's environment
store        the key-value store rank 0 hosts (TCPStore) or a shared directory (FileStore)
handshake    the opening of every connection: magic, version, mutual HMAC authentication
user_secret  the store's secret for a job on one host without PYCOLL_SECRET: a file only this user can read
listener     one non-blocking server loop for the store and the peer listeners (bounded, flood-proof)
connections  every pair of ranks connected by one authenticated socket, handed to the TCP transport
"""
