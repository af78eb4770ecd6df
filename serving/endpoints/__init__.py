"""The endpoint record (_record: where it runs, prices, limits, call settings), what a request
needs of it (_capabilities) and the choice rules over N endpoints (_choice). Public names are exported
from `serving`."""
