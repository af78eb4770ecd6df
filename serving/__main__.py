from serving._cli import main

raise SystemExit(main())
