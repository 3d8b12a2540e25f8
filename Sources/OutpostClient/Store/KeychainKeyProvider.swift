#if canImport(Security)
    import Crypto
    import Foundation
    import Security

    /// Keeps a store's key in the Keychain, on this device only, readable after the first unlock since boot
    /// (`kSecAttrAccessibleAfterFirstUnlockThisDeviceOnly`): background syncs can open the store while the phone
    /// is locked, and the key never leaves the device in a backup. Created on first use.
    public struct KeychainKeyProvider: KeyProvider {
        /// The Keychain item's service; one per app.
        public var service: String
        /// The item's account; one per store.
        public var account: String
        /// A Keychain access group shared with an app extension, or nil for the app's own.
        public var accessGroup: String?

        public init(service: String, account: String = "device-store", accessGroup: String? = nil) {
            self.service = service
            self.account = account
            self.accessGroup = accessGroup
        }

        public func key() throws -> SymmetricKey {
            if let data = try stored() {
                guard data.count == 32 else {
                    throw ClientError(.keyUnavailable, "the Keychain item \(service)/\(account) is not a 256-bit key")
                }
                return SymmetricKey(data: data)
            }
            let key = SymmetricKey(size: .bits256)
            var item = query
            item[kSecValueData as String] = key.withUnsafeBytes { Data($0) }
            item[kSecAttrAccessible as String] = kSecAttrAccessibleAfterFirstUnlockThisDeviceOnly
            let status = SecItemAdd(item as CFDictionary, nil)
            // Another process (an extension) created it meanwhile: that one is the key.
            if status == errSecDuplicateItem { return try self.key() }
            guard status == errSecSuccess else {
                throw ClientError(.keyUnavailable, "the Keychain refused to keep the store's key (status \(status))")
            }
            return key
        }

        public func destroy() throws {
            let status = SecItemDelete(query as CFDictionary)
            guard status == errSecSuccess || status == errSecItemNotFound else {
                throw ClientError(.keyUnavailable, "the Keychain refused to delete the store's key (status \(status))")
            }
        }

        /// The item's attributes, without its value.
        private var query: [String: Any] {
            var query: [String: Any] = [
                kSecClass as String: kSecClassGenericPassword,
                kSecAttrService as String: service,
                kSecAttrAccount as String: account,
                kSecAttrSynchronizable as String: false,
                kSecUseDataProtectionKeychain as String: true,
            ]
            if let accessGroup { query[kSecAttrAccessGroup as String] = accessGroup }
            return query
        }

        private func stored() throws -> Data? {
            var search = query
            search[kSecReturnData as String] = true
            search[kSecMatchLimit as String] = kSecMatchLimitOne
            var result: CFTypeRef?
            let status = SecItemCopyMatching(search as CFDictionary, &result)
            switch status {
            case errSecSuccess: return result as? Data
            case errSecItemNotFound: return nil
            default: throw ClientError(.keyUnavailable, "the Keychain could not be read (status \(status))")
            }
        }
    }
#endif
