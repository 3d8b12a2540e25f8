// The wire types an app meets in the SDK's API (JSONValue, MutationOperation, Role…) come with it.
@_exported import OutpostProtocol
