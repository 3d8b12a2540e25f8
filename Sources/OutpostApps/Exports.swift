// An app on the field apps imports OutpostApps alone: the SDK and the apps' record types come with it.
@_exported import OutpostClient
@_exported import OutpostRecords
