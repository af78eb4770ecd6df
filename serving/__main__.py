import sys

from serving._cli import main

sys.exit(main())
