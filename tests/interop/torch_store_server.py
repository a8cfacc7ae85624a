"""Hosts PyTorch's own TCPStore server (as a torchrun agent does) and prints its port, then
serves until killed. Usage: torch_store_server.py libuv|classic"""
import datetime
import sys
import time

import torch.distributed as dist

store = dist.TCPStore("127.0.0.1", 0, None, True, timeout=datetime.timedelta(seconds=300),
                      wait_for_workers=False, use_libuv=sys.argv[1] == "libuv")
print(store.port, flush=True)
while True:
    time.sleep(3600)
